package cdc

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// TestCleanupUsableMark: the newest mark the checkpoint has reached and a
// retention old is used, and the marks before it are forgotten; a mark
// the checkpoint has not reached, or too young, proves nothing.
func TestCleanupUsableMark(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	marks := []mark{{xmin: 10, lsn: 100, at: t0}, {xmin: 20, lsn: 200, at: t0.Add(time.Minute)}, {xmin: 30, lsn: 300, at: t0.Add(2 * time.Minute)}}
	for _, tc := range []struct {
		name  string
		saved pglogrepl.LSN
		now   time.Time
		want  uint32 // the mark's xmin; 0 for none
		left  int
	}{
		{name: "checkpoint behind every mark", saved: 99, now: t0.Add(time.Hour), want: 0, left: 3},
		{name: "checkpoint at the second mark", saved: 200, now: t0.Add(time.Hour), want: 20, left: 2},
		{name: "checkpoint past all, the last too young", saved: 1000, now: t0.Add(time.Minute + 30*time.Second + 30*time.Minute), want: 20, left: 2},
		{name: "too young", saved: 1000, now: t0.Add(29 * time.Minute), want: 0, left: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cleaner{src: &Source{cfg: Config{Cleanup: Cleanup{Retention: 30 * time.Minute}}}, marks: append([]mark(nil), marks...)}
			m, ok := c.usable(tc.saved, tc.now)
			if ok != (tc.want != 0) || m.xmin != tc.want {
				t.Errorf("usable = %+v, %v; want xmin %d", m, ok, tc.want)
			}
			if len(c.marks) != tc.left {
				t.Errorf("%d marks left, want %d", len(c.marks), tc.left)
			}
		})
	}
}

func TestCleanupValidate(t *testing.T) {
	c := Cleanup{Retention: -time.Second, BatchSize: -1, Interval: -time.Second}
	err := c.Validate()
	for _, want := range []string{"cdc.cleanup.retention", "cdc.cleanup.batch_size", "cdc.cleanup.interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %s", err, want)
		}
	}
}
