package cdc

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

func TestConfigReceiveTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    time.Duration // the receive timeout after defaults
		wantErr []string      // substrings of the error; none: valid
	}{
		{"default", Config{}, 8 * time.Second, nil},
		// The stream speaks every third of the receive timeout when the
		// status interval is longer.
		{"slow status intervals", Config{StatusInterval: 20 * time.Second}, 8 * time.Second, nil},
		{"set", Config{StatusInterval: 500 * time.Millisecond, ReceiveTimeout: 2 * time.Second}, 2 * time.Second, nil},
		{"shorter than the status interval", Config{StatusInterval: 10 * time.Second, ReceiveTimeout: 5 * time.Second}, 5 * time.Second, nil},
		{"under a second", Config{ReceiveTimeout: 900 * time.Millisecond}, 900 * time.Millisecond,
			[]string{"cdc.receive_timeout (900ms) must be at least 1s"}},
		{"takeover within two of the relay's updates", Config{TakeoverAfter: 5 * time.Second}, 8 * time.Second,
			[]string{"cdc.takeover_after (5s) must be 0 (off) or longer than twice 2.666s"}},
		{"heartbeat query without a heartbeat", Config{HeartbeatQuery: "SELECT 1"}, 8 * time.Second,
			[]string{"cdc.heartbeat_query is set but cdc.heartbeat_interval is 0"}},
		{"heartbeat query", Config{HeartbeatQuery: "SELECT 1", HeartbeatInterval: time.Second}, 8 * time.Second, nil},
		{"every problem at once", Config{ReceiveTimeout: 500 * time.Millisecond, Network: pgsql.Network{Keepalive: -time.Second}}, 500 * time.Millisecond,
			[]string{"cdc.receive_timeout (500ms) must be at least 1s", "postgres.keepalive: -1s is negative"}},
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

// TestConfigValidateNames: every name the source puts into SQL is one
// PostgreSQL keeps as written, with no character that could end a line of
// the SQL printed for it; quotes, semicolons and spaces are quoted, so
// they pass.
func TestConfigValidateNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string // fragments of the error; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"hostile but legal", func(c *Config) {
			c.Table, c.Publication, c.Columns.ID = `we"ird.out; DROP TABLE x; --`, "pub'; --", `id"`
		}, nil},
		{"line feed in the table", func(c *Config) { c.Table = "public.outbox\nDROP TABLE victim; --" },
			[]string{`outbox.table: "public.outbox\nDROP TABLE victim; --" contains a control character (a line feed, U+000A at byte 13)`}},
		{"escape in the schema", func(c *Config) { c.Table = "s\x1bchema.outbox" }, []string{`outbox.table: "s\x1bchema.outbox"`, "an escape"}},
		{"carriage return in one of several tables", func(c *Config) { c.Tables = []string{"a.outbox", "b.out\rbox"} },
			[]string{`outbox.tables: "b.out\rbox"`, "a carriage return"}},
		{"tab in a column", func(c *Config) { c.Columns.AggregateType = "aggregate\ttype" },
			[]string{`outbox.columns.aggregatetype: "aggregate\ttype" contains a control character (a tab`}},
		{"line feed in a table's own column", func(c *Config) {
			c.Tables = []string{"a.outbox", "b.outbox"}
			c.TableColumns = map[string]connector.ColumnMap{"b.outbox": {Payload: "pay\nload"}}
		}, []string{`outbox.tables ("b.outbox") columns.payload: "pay\nload"`}},
		{"line feed in the publication", func(c *Config) { c.Publication = "pub\n\\! ls" },
			[]string{`cdc.publication: "pub\n\\! ls" contains a control character`}},
		{"invalid UTF-8 in the publication", func(c *Config) { c.Publication = "pub\xc3" }, []string{`cdc.publication: "pub\xc3" is not valid UTF-8`}},
		{"64-byte publication", func(c *Config) { c.Publication = strings.Repeat("p", 64) }, []string{"cdc.publication", "63-byte limit"}},
		{"slot", func(c *Config) { c.Slot = "slot\n" }, []string{`cdc.slot: "slot\n" is not a valid slot name`}},
		{"every problem at once", func(c *Config) { c.Table, c.Columns.ID, c.Publication = "a.b\n", "i\rd", "p\x00" },
			[]string{"outbox.table", "outbox.columns.id", "cdc.publication"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{URL: "postgres://relay@localhost/app"}
			tc.edit(&c)
			c.SetDefaults()
			for _, err := range []error{c.ValidateNames(), c.Validate()} {
				if len(tc.want) == 0 {
					if err != nil {
						t.Fatalf("valid names refused: %v", err)
					}
					continue
				}
				for _, want := range tc.want {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("error %v, want one containing %q", err, want)
					}
				}
			}
		})
	}
}
