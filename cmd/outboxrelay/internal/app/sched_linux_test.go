package app

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// policies are the scheduling policies of the process's threads, by id.
func policies(t *testing.T) map[int]uint32 {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]uint32{}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil {
			out[tid] = attr.Policy
		}
	}
	return out
}

// The relay moves every thread it has to SCHED_BATCH, keeping their nice
// value, and the threads the runtime starts afterwards run under it too.
func TestSetSchedBatch(t *testing.T) {
	if attr, err := unix.SchedGetAttr(0, 0); err != nil || attr.Policy != unix.SCHED_NORMAL {
		t.Skipf("this test process does not run under the default policy (%v, %v)", attr, err)
	}
	t.Cleanup(func() {
		// Back to the default policy, which a thread may return to unprivileged.
		for tid, policy := range policies(t) {
			if policy == unix.SCHED_BATCH {
				attr, err := unix.SchedGetAttr(tid, 0)
				if err == nil {
					attr.Policy = unix.SCHED_NORMAL
					_ = unix.SchedSetAttr(tid, attr, 0)
				}
			}
		}
	})
	before, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}

	if got := setSchedBatch(); got != schedBatchDone {
		t.Fatalf("setSchedBatch: %q, want %q", got, schedBatchDone)
	}
	threads := policies(t)
	for tid, policy := range threads {
		if policy != unix.SCHED_BATCH {
			t.Errorf("thread %d under policy %d after setSchedBatch, want SCHED_BATCH (%d)", tid, policy, unix.SCHED_BATCH)
		}
	}
	after, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Nice != before.Nice {
		t.Errorf("nice %d after setSchedBatch, was %d", after.Nice, before.Nice)
	}

	// More goroutines locked to threads than the process has threads: at
	// least one runs on a thread started after the move.
	n := len(threads) + 1
	type seen struct {
		tid    int
		policy uint32
		err    error
	}
	got := make(chan seen, n)
	release := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			attr, err := unix.SchedGetAttr(0, 0)
			s := seen{tid: unix.Gettid(), err: err}
			if err == nil {
				s.policy = attr.Policy
			}
			got <- s
			<-release
		}()
	}
	fresh := 0
	for range n {
		s := <-got
		if s.err != nil {
			t.Fatal(s.err)
		}
		if _, old := threads[s.tid]; !old {
			fresh++
		}
		if s.policy != unix.SCHED_BATCH {
			t.Errorf("thread %d under policy %d, want SCHED_BATCH", s.tid, s.policy)
		}
	}
	close(release)
	if fresh == 0 {
		t.Errorf("no thread started after the move among %d locked goroutines", n)
	}

	if got := setSchedBatch(); got != "batch (the process's own)" {
		t.Errorf("setSchedBatch again: %q, want the process's own", got)
	}
}
