package app

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"sync/atomic"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the container's memory limit the Go
// runtime is told to stay under when GOMEMLIMIT is not set: the rest is
// what the runtime does not count (thread stacks, the binary's pages) and
// room for a collection to finish before the kernel's limit is reached.
const memoryLimitRatio = 0.9

// memoryLimit is the runtime's soft memory limit and where it came from,
// for the start line.
type memoryLimit struct {
	bytes int64 // math.MaxInt64: none
	from  string
}

// limited is what LimitMemory set; nil when this process has not called
// it, as when the relay runs inside a test or another program.
var limited atomic.Pointer[memoryLimit]

// LimitMemory sets the Go runtime's soft memory limit from the memory
// limit of the process's cgroup (v1 or v2) when GOMEMLIMIT is not set, so
// that a relay in a container collects harder as it nears its limit
// instead of being killed at it. Go sizes GOMAXPROCS from the cgroup's CPU
// limit by itself, but leaves the memory limit alone. AUTOMEMLIMIT, read by
// the library, replaces the ratio (a number in (0, 1]) or turns this off
// (off).
//
// A cgroup that cannot be read leaves the runtime without a limit, which
// the start line says; an AUTOMEMLIMIT the library cannot use is an error.
//
// The commands that are the relay's process call it before Run; Run does
// not, since tests and other programs run the relay in processes whose
// runtime is theirs.
func LimitMemory() error {
	l, err := setMemoryLimit(memlimit.FromCgroup)
	if err != nil {
		return err
	}
	limited.Store(&l)
	return nil
}

// setMemoryLimit sets the soft memory limit from what provider reports,
// as LimitMemory says, and returns what it is and where it came from.
func setMemoryLimit(provider memlimit.Provider) (memoryLimit, error) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return memoryLimit{bytes: debug.SetMemoryLimit(-1), from: "GOMEMLIMIT=" + v}, nil
	}
	if os.Getenv("AUTOMEMLIMIT") == "off" {
		return memoryLimit{bytes: debug.SetMemoryLimit(-1), from: "none: AUTOMEMLIMIT=off"}, nil
	}
	var container uint64
	var found error
	called := false
	limit, err := memlimit.Set(
		memlimit.WithRatio(memoryLimitRatio),
		memlimit.WithProvider(func() (uint64, error) {
			called = true
			container, found = provider()
			return container, found
		}),
	)
	switch {
	case !called && err != nil:
		return memoryLimit{}, fmt.Errorf("AUTOMEMLIMIT=%q: %w; set a ratio of the container's memory limit in (0, 1], or off", os.Getenv("AUTOMEMLIMIT"), err)
	case errors.Is(found, memlimit.ErrNoLimit):
		return memoryLimit{bytes: limit, from: "none: the cgroup sets no memory limit"}, nil
	case found != nil:
		// No cgroup (outside Linux, or a sandbox that hides it): Go's
		// default, no limit.
		return memoryLimit{bytes: debug.SetMemoryLimit(-1), from: "none: reading the cgroup's memory limit: " + found.Error()}, nil
	case err != nil:
		return memoryLimit{}, err
	}
	ratio := fmt.Sprint(memoryLimitRatio)
	if v := os.Getenv("AUTOMEMLIMIT"); v != "" {
		ratio = "AUTOMEMLIMIT=" + v
	}
	return memoryLimit{bytes: limit, from: fmt.Sprintf("%s of the cgroup's memory limit of %d MiB", ratio, container>>20)}, nil
}

// startLineMemory is the start line's gomemlimit and gomemlimit_from.
func startLineMemory() (limit, from string) {
	l := memoryLimit{bytes: debug.SetMemoryLimit(-1), from: "the process's own (the relay runs inside another program)"}
	if set := limited.Load(); set != nil {
		l = *set
	}
	if l.bytes == math.MaxInt64 {
		return "none", l.from
	}
	return fmt.Sprintf("%d MiB", l.bytes>>20), l.from
}
