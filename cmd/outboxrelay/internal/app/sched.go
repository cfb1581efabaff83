package app

// schedBatchDone is what the start line's scheduling says when the relay
// moved its threads to Linux's SCHED_BATCH policy (setSchedBatch), as
// process.sched_batch asks by default.
//
// A SCHED_BATCH thread does not preempt the one running on a core when it
// wakes; the scheduler's tick and its turn bring it on. On a node the
// relay shares with PostgreSQL, a caught-up relay is woken by every
// message the walsender sends, and under the default policy it took the
// walsender's core in the middle of the transaction, once per message:
// both sides paid a context switch per message, and the walsender waited
// for its core back before sending the next; the poller's backend, likewise,
// at each answer. Under SCHED_BATCH the walsender sends the transaction and
// the relay reads it in one go. Measured side by side on two cores beside a
// neighbour (docs/performance.md, "Yielding on wakeup"): at 5k events/s the
// walsender's involuntary context switches fell by two thirds, the p99
// from a median of 9.1 ms to 6.7, and the poller drained 0.43-0.54x the
// CDC drain where it had 0.28-0.44x. Where a core is idle, the relay is
// woken on it as before; where every core is busy with other work, a
// wakeup waits for a tick instead of preempting, which process.sched_batch
// false undoes.
const schedBatchDone = "batch (process.sched_batch)"
