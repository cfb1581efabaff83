package app

import (
	"runtime"
	"testing"
)

// On two CPUs or fewer the relay runs on one P unless GOMAXPROCS says
// otherwise; on more, Go's default stands.
func TestLimitProcs(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	for _, tc := range []struct {
		name     string
		env      string
		procs    int
		want     int
		wantFrom string
	}{
		{name: "two CPUs", procs: 2, want: 1, wantFrom: "one P on 2 CPUs or fewer (GOMAXPROCS not set)"},
		{name: "one CPU", procs: 1, want: 1, wantFrom: "one P on 2 CPUs or fewer (GOMAXPROCS not set)"},
		{name: "four CPUs", procs: 4, want: 4, wantFrom: "Go's default"},
		{name: "GOMAXPROCS set", env: "2", procs: 2, want: 2, wantFrom: "GOMAXPROCS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(tc.procs)
			from := limitProcs(func(k string) string {
				if k == "GOMAXPROCS" {
					return tc.env
				}
				return ""
			})
			if got := runtime.GOMAXPROCS(0); got != tc.want || from != tc.wantFrom {
				t.Errorf("GOMAXPROCS %d from %q, want %d from %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
}
