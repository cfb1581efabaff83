package app

import (
	"os"
	"sync"
)

// Tuning is what TuneRuntime set of the Go runtime, for the start line.
type Tuning struct {
	// ProcsFrom says where GOMAXPROCS came from (limitProcs).
	ProcsFrom string
	// MemoryLimit is the soft memory limit set from the container's, and
	// MemoryLimitFrom the file it was read from; 0 when none was set.
	MemoryLimit     int64
	MemoryLimitFrom string
}

var (
	tuneMu sync.Mutex
	tuned  *Tuning
)

// TuneRuntime sets the Go runtime of a relay's process as its environment
// leaves it to the relay: one P on two CPUs or fewer (limitProcs), and a
// memory limit from the container's (limitMemory). The commands that are
// the process call it before Run; Run does not, because tests and other
// programs run it in processes of their own, whose runtime is theirs.
func TuneRuntime() Tuning {
	tuneMu.Lock()
	defer tuneMu.Unlock()
	t := Tuning{ProcsFrom: limitProcs(os.Getenv)}
	t.MemoryLimit, t.MemoryLimitFrom = limitMemory(os.Getenv, "/")
	tuned = &t
	return t
}

// tuning is what TuneRuntime set, if this process called it.
func tuning() (Tuning, bool) {
	tuneMu.Lock()
	defer tuneMu.Unlock()
	if tuned == nil {
		return Tuning{}, false
	}
	return *tuned, true
}
