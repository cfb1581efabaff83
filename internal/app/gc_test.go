package app

import (
	"runtime/debug"
	"testing"
)

// Unless GOGC is set, the relay collects at 150; when it is set, the
// runtime's reading of it stands.
func TestSetGC(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })
	for _, tc := range []struct {
		name     string
		env      string
		want     int
		wantFrom string
	}{
		{name: "GOGC not set", want: 150, wantFrom: "150 (GOGC not set)"},
		{name: "GOGC set", env: "100", want: 100, wantFrom: "GOGC=100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100) // what the runtime read of GOGC=100, or of none
			from := setGC(func(k string) string {
				if k == "GOGC" {
					return tc.env
				}
				return ""
			})
			if got := debug.SetGCPercent(100); got != tc.want || from != tc.wantFrom {
				t.Errorf("GOGC %d from %q, want %d from %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
}
