//go:build !linux

package app

// setSchedBatch does nothing outside Linux, which has no SCHED_BATCH.
func setSchedBatch() string {
	return "the process's own (SCHED_BATCH is Linux's)"
}
