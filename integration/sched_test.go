package integration

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBinarySchedBatch runs the built binary and reads its threads'
// scheduling policy from the kernel: SCHED_BATCH by default, so that its
// wakeups do not preempt the walsender on a shared core, and the policy it
// started with when process.sched_batch is false. The start line says
// which.
func TestBinarySchedBatch(t *testing.T) {
	t.Parallel()
	if attr, err := unix.SchedGetAttr(0, 0); err != nil || attr.Policy != unix.SCHED_NORMAL {
		t.Skipf("the test runs under a policy of its own, which the relay would keep (%v, %v)", attr, err)
	}
	cfg := newEnv(t, cdcKind).cdcConfig("")

	for _, tc := range []struct {
		env    []string
		policy uint32
		says   string
	}{
		{policy: unix.SCHED_BATCH, says: `scheduling="batch (process.sched_batch)"`},
		{env: []string{"OUTBOXRELAY_PROCESS_SCHED_BATCH=false"}, policy: unix.SCHED_NORMAL, says: `scheduling="the process's own (process.sched_batch false)"`},
	} {
		p := runBinary(t, cfg, tc.env...)
		waitLog(t, p, "outboxrelay starting", time.Minute)
		waitLog(t, p, tc.says, time.Second)
		pid := p.cmd.Process.Pid
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			attr, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				continue // the thread ended
			}
			if attr.Policy != tc.policy {
				t.Errorf("%v: thread %d of the relay under policy %d, want %d", tc.env, tid, attr.Policy, tc.policy)
			}
		}
		if len(tasks) < 2 {
			t.Errorf("%v: the relay has %d threads; the check read none of the runtime's", tc.env, len(tasks))
		}
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}
