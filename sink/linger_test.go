package sink

import (
	"strings"
	"testing"
	"time"
)

func TestLingerValidate(t *testing.T) {
	for _, tc := range []struct {
		linger time.Duration
		bad    bool
	}{{0, false}, {5 * time.Millisecond, false}, {-time.Millisecond, true}} {
		c := Config{Brokers: []string{"b:9092"}, Linger: tc.linger}
		c.SetDefaults()
		err := c.Validate()
		if tc.bad != (err != nil) || (tc.bad && !strings.Contains(err.Error(), "kafka.linger")) {
			t.Errorf("linger %s: Validate = %v", tc.linger, err)
		}
	}
}
