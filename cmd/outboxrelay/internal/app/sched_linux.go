package app

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// setSchedBatch moves every thread of the process from the default policy
// to SCHED_BATCH, keeping its nice value, and returns what it did, for the
// start line (schedBatchDone). A thread the runtime starts later inherits
// the policy of the thread that starts it, so once a pass over the threads
// finds none left to move, every thread the process will have runs under
// it. A process started under another policy (chrt) keeps it: the
// operator chose it. Moving a thread to SCHED_BATCH needs no privilege;
// where a sandbox refuses the call, the relay runs as it started (refused
// part way, with the threads moved so far), and the start line says why.
func setSchedBatch() string {
	attr, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return "the process's own: " + err.Error()
	}
	switch attr.Policy {
	case unix.SCHED_BATCH:
		return "batch (the process's own)"
	case unix.SCHED_NORMAL:
	default:
		return fmt.Sprintf("the process's own (policy %d)", attr.Policy)
	}
	total := 0
	for range 10 {
		moved, err := moveThreads()
		total += moved
		switch {
		case err != nil && total == 0:
			return "the process's own: " + err.Error()
		case err != nil:
			// A sandbox that allows the call for some threads only.
			return fmt.Sprintf("batch for %d threads, then: %v", total, err)
		case moved == 0:
			return schedBatchDone
		}
	}
	// Threads still appearing under the default policy after ten passes
	// would be a runtime that starts them from a thread of its own: say so
	// rather than claim all of them moved.
	return "batch for most threads: threads kept appearing under the default policy"
}

// moveThreads moves the process's threads that run under the default
// policy to SCHED_BATCH, and returns how many it moved.
func moveThreads() (int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		attr, err := unix.SchedGetAttr(tid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // the thread ended
		}
		if err != nil {
			return moved, fmt.Errorf("sched_getattr of thread %d: %w", tid, err)
		}
		if attr.Policy != unix.SCHED_NORMAL {
			continue
		}
		attr.Policy = unix.SCHED_BATCH
		if err := unix.SchedSetAttr(tid, attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return moved, fmt.Errorf("sched_setattr of thread %d to SCHED_BATCH: %w", tid, err)
		}
		moved++
	}
	return moved, nil
}
