package app

import (
	"math"
	"runtime/debug"
	"testing"
)

// Unless GOGC is set, the relay collects at 150, under a memory limit of
// the peak its configuration is sized for less the binary's pages, unless
// GOMEMLIMIT or a lower limit from the container stands; when GOGC is set, the runtime's
// reading of it stands, and no limit is set.
func TestSetGC(t *testing.T) {
	const mib = 1 << 20
	wasGC, wasLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(wasGC); debug.SetMemoryLimit(wasLimit) })
	for _, tc := range []struct {
		name      string
		env       map[string]string
		container int64
		wantGC    int
		wantLimit int64 // math.MaxInt64: none set
		wantFrom  string
	}{
		{name: "nothing set", wantGC: 150, wantLimit: 153 * mib,
			wantFrom: "150 (GOGC not set), under a memory limit of 153 MiB: the configuration's peak less the binary's pages"},
		{name: "a container limit above it", container: 230 * mib, wantGC: 150, wantLimit: 153 * mib,
			wantFrom: "150 (GOGC not set), under a memory limit of 153 MiB: the configuration's peak less the binary's pages"},
		{name: "a container limit below it", container: 100 * mib, wantGC: 150, wantLimit: math.MaxInt64,
			wantFrom: "150 (GOGC not set)"},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "64MiB"}, wantGC: 150, wantLimit: math.MaxInt64,
			wantFrom: "150 (GOGC not set)"},
		{name: "GOGC set", env: map[string]string{"GOGC": "100"}, wantGC: 100, wantLimit: math.MaxInt64,
			wantFrom: "GOGC=100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What the runtime read of GOGC=100 or of none, and of no
			// GOMEMLIMIT; the container's limit is left to limitMemory.
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			from := setGC(func(k string) string { return tc.env[k] }, 173*mib, tc.container)
			gotLimit := debug.SetMemoryLimit(-1)
			if got := debug.SetGCPercent(100); got != tc.wantGC || gotLimit != tc.wantLimit || from != tc.wantFrom {
				t.Errorf("GOGC %d, memory limit %d, from %q; want %d, %d, %q", got, gotLimit, from, tc.wantGC, tc.wantLimit, tc.wantFrom)
			}
		})
	}
}
