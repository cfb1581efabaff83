package bench

import (
	"testing"
	"time"
)

// TestCountWait: the drain counts every 2 ms once the rate so far says
// the end is near, and no more often than it samples memory before.
func TestCountWait(t *testing.T) {
	for _, c := range []struct {
		left, done int64
		elapsed    time.Duration
		want       time.Duration
	}{
		{left: 300000, done: 0, elapsed: 100 * time.Millisecond, want: rssSample}, // nothing yet
		{left: 290000, done: 10000, elapsed: 200 * time.Millisecond, want: rssSample},
		{left: 1000, done: 100000, elapsed: time.Second, want: 5 * time.Millisecond},
		{left: 100, done: 299900, elapsed: 3 * time.Second, want: 2 * time.Millisecond},
	} {
		if got := countWait(c.left, c.done, c.elapsed); got != c.want {
			t.Errorf("countWait(%d, %d, %s) = %s, want %s", c.left, c.done, c.elapsed, got, c.want)
		}
	}
}
