package cdc

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

func TestConfigReceiveTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    time.Duration // the receive timeout after defaults
		wantErr []string      // substrings of the error; none: valid
	}{
		{"default", Config{}, 30 * time.Second, nil},
		{"three slow status intervals", Config{StatusInterval: 20 * time.Second}, 60 * time.Second, nil},
		{"set", Config{StatusInterval: 500 * time.Millisecond, ReceiveTimeout: 2 * time.Second}, 2 * time.Second, nil},
		{"not above the status interval", Config{StatusInterval: 10 * time.Second, ReceiveTimeout: 10 * time.Second}, 10 * time.Second,
			[]string{"cdc.receive_timeout (10s) must be longer than cdc.status_interval (10s)"}},
		{"every problem at once", Config{ReceiveTimeout: 5 * time.Second, Network: pgsql.Network{Keepalive: -time.Second}}, 5 * time.Second,
			[]string{"cdc.receive_timeout (5s) must be longer than cdc.status_interval (10s)", "postgres.keepalive: -1s is negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.URL = "postgres://relay@localhost/app"
			c.SetDefaults()
			if c.ReceiveTimeout != tc.want {
				t.Errorf("receive timeout %s, want %s", c.ReceiveTimeout, tc.want)
			}
			err := c.Validate()
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("valid config refused: %v", err)
			}
			for _, want := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want one containing %q", err, want)
				}
			}
		})
	}
}
