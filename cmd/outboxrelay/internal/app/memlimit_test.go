package app

import (
	"errors"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestSetMemoryLimit sets the runtime's soft limit to 0.9 of the
// container's, leaves it alone when GOMEMLIMIT is set or AUTOMEMLIMIT is
// off, and says where the limit came from in each case.
func TestSetMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	for _, tc := range []struct {
		name      string
		env       map[string]string
		provider  memlimit.Provider
		wantLimit int64 // math.MaxInt64: none
		wantFrom  string
	}{
		{name: "a container limit", provider: memlimit.Limit(256 * mib),
			wantLimit: 241591910 /* 0.9 of 256 MiB, rounded down */, wantFrom: "0.9 of the cgroup's memory limit of 256 MiB"},
		{name: "AUTOMEMLIMIT sets the ratio", env: map[string]string{"AUTOMEMLIMIT": "0.5"}, provider: memlimit.Limit(256 * mib),
			wantLimit: 128 * mib, wantFrom: "AUTOMEMLIMIT=0.5 of the cgroup's memory limit of 256 MiB"},
		{name: "no container limit", provider: func() (uint64, error) { return 0, memlimit.ErrNoLimit },
			wantLimit: math.MaxInt64, wantFrom: "none: the cgroup sets no memory limit"},
		{name: "no cgroup", provider: func() (uint64, error) { return 0, errors.New("cgroups is not supported on this system") },
			wantLimit: math.MaxInt64, wantFrom: "none: reading the cgroup's memory limit: cgroups is not supported on this system"},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "64MiB"}, provider: memlimit.Limit(256 * mib),
			wantLimit: math.MaxInt64, wantFrom: "GOMEMLIMIT=64MiB"},
		{name: "AUTOMEMLIMIT off", env: map[string]string{"AUTOMEMLIMIT": "off"}, provider: memlimit.Limit(256 * mib),
			wantLimit: math.MaxInt64, wantFrom: "none: AUTOMEMLIMIT=off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setenv(t, tc.env, "GOMEMLIMIT", "AUTOMEMLIMIT")
			// What the runtime reads of no GOMEMLIMIT; with GOMEMLIMIT
			// set, that it is left as it was.
			debug.SetMemoryLimit(math.MaxInt64)
			got, err := setMemoryLimit(tc.provider)
			if err != nil {
				t.Fatal(err)
			}
			if runtime := debug.SetMemoryLimit(-1); runtime != tc.wantLimit || got.bytes != tc.wantLimit || got.from != tc.wantFrom {
				t.Errorf("runtime limit %d, reported %d from %q; want %d from %q", runtime, got.bytes, got.from, tc.wantLimit, tc.wantFrom)
			}
		})
	}
}

// An AUTOMEMLIMIT the library cannot use stops the start, naming it, and
// leaves the runtime's limit alone.
func TestSetMemoryLimitBadAUTOMEMLIMIT(t *testing.T) {
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	setenv(t, map[string]string{"AUTOMEMLIMIT": "90%"}, "GOMEMLIMIT", "AUTOMEMLIMIT")
	debug.SetMemoryLimit(math.MaxInt64)
	_, err := setMemoryLimit(memlimit.Limit(256 << 20))
	if err == nil || !strings.Contains(err.Error(), `AUTOMEMLIMIT="90%"`) {
		t.Errorf("err = %v, want one naming AUTOMEMLIMIT=\"90%%\"", err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("runtime limit %d after the error, want none", got)
	}
}

// setenv sets each of keys to env's value for the test, and unsets those
// env has none for.
func setenv(t *testing.T, env map[string]string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		t.Setenv(k, env[k]) // restored at the test's end
		if _, ok := env[k]; !ok {
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}
