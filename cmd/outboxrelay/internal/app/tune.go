package app

import (
	"os"
	"sync/atomic"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

// tuning is what TuneRuntime set of the Go runtime and the process's
// scheduling, for the start line.
type tuning struct {
	// procsFrom says where GOMAXPROCS came from (limitProcs), gcFrom
	// where GOGC did (setGC), and scheduling what became of the threads'
	// scheduling policy (setSchedBatch).
	procsFrom  string
	gcFrom     string
	scheduling string
	// memoryLimit is the soft memory limit set from the container's, and
	// memoryLimitFrom the file it was read from; 0 when none was set.
	memoryLimit     int64
	memoryLimitFrom string
}

// tuned is what TuneRuntime set, nil when this process has not called it.
var tuned atomic.Pointer[tuning]

// TuneRuntime sets the Go runtime of a relay's process as its environment
// leaves it to the relay: one P on two CPUs or fewer (limitProcs), a
// memory limit from the container's (limitMemory), and GOGC 150 within
// the memory cfg is sized for (setGC); and, unless process.sched_batch is
// false, puts its threads under Linux's SCHED_BATCH policy
// (setSchedBatch). The commands that are the process call it before Run;
// Run does not, because tests and other programs run it in processes of
// their own, whose runtime is theirs.
func TuneRuntime(cfg *config.Config) {
	t := &tuning{procsFrom: limitProcs(os.Getenv)}
	t.memoryLimit, t.memoryLimitFrom = limitMemory(os.Getenv, "/")
	t.gcFrom = setGC(os.Getenv, cfg.Memory().Peak(), t.memoryLimit)
	t.scheduling = "the process's own (process.sched_batch false)"
	if on := cfg.Process.SchedBatch; on == nil || *on {
		t.scheduling = setSchedBatch()
	}
	tuned.Store(t)
}
