package connector

import (
	"context"
	"fmt"
	"time"
)

// abortTimeout bounds the sink's Abort, which runs when publishing's own
// time may be up.
const abortTimeout = 10 * time.Second

// drain settles what is in flight as a run ends, and returns the run's
// failure. On a graceful stop it waits, within ShutdownTimeout, for Kafka to
// acknowledge it; with Kafka transactions it commits what ends at a
// checkpoint, even after the source ended, since a successor's fencing
// refuses what comes too late. Whatever was not drained is dropped (abort).
func (run *run) drain(ctx context.Context, failure error) error {
	r, t := run.r, run.t
	drained := false
	if failure == nil || (run.srcEnded && r.txn != nil) {
		err := run.flush()
		drained = err == nil
		switch {
		case err != nil && failure != nil:
			r.log.Warn("the open Kafka transaction could not be committed and is aborted; its events are published again from the checkpoint", "err", err)
		case err != nil:
			failure = fmt.Errorf("drain in-flight events within %s: %w", r.cfg.ShutdownTimeout, err)
			r.log.Warn("shutdown timeout passed with events in flight; they will be published again on the next start", "in_flight", t.inFlight())
		}
	}
	if failure == nil {
		// A message refused while the stop drained: its batch is not done,
		// so nothing is lost, but the stop would end without a word.
		if err := t.err(); err != nil {
			r.log.Error("an event failed while the relay stopped; it is published again on the next start", "err", err)
		}
	}
	if !drained {
		run.abort(ctx, failure)
	}
	return failure
}

// flush waits until Kafka has acknowledged what is in flight or, with
// Kafka transactions, commits the open one if it ends at a checkpoint: one
// cut in the middle of a source transaction is left to the abort, and its
// events are published again from the checkpoint.
func (run *run) flush() error {
	if run.srcEnded {
		run.deadline() // ctx may go on: the source's end starts the bound
	}
	if run.r.txn != nil {
		return run.tx.finish(run.pubCtx)
	}
	return run.r.sink.Flush(run.pubCtx)
}

// abort fails whatever the sink still holds, so that every Done is called
// and the sink starts clean on the next run. When the source lost its
// connection, another instance may have taken over what it reads (a
// standby, after this one was frozen or cut off): without Kafka
// transactions nothing fences this one, so it drops the records it has not
// sent yet rather than write them after the other's, and they are
// published again from the checkpoint. What was already on its way still
// lands. With nothing in flight there is nothing to drop, and nothing to
// say: a source that never connected lost no connection.
func (run *run) abort(ctx context.Context, failure error) {
	r, t := run.r, run.t
	if run.srcEnded && r.txn == nil && t.inFlight() > 0 {
		r.log.Info("the source lost its connection: dropping the events not yet sent to Kafka rather than sending them, in case another instance has taken over; they are published again from the checkpoint",
			"in_flight", t.inFlight(), "err", failure)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if err := r.sink.Abort(actx); err != nil {
		r.log.Warn("abort buffered events", "err", err)
	}
	run.tx.release(t, errTxnAborted)
}

// carryOver keeps what the next run must know of a run that failed, and
// returns the failure to settle. The suspects this run took from the
// poisoned set go back unless their batches were done (a later event's
// refusal may have aborted the Kafka transaction they were in), so that
// the next run does not start over with them. A dead letter record the
// broker refused is the failure, whichever error ended the run (in a
// Kafka transaction, the commit's).
func (r *Runner) carryOver(t *tracker, failure error) error {
	if failure != nil {
		for _, tp := range r.taken {
			if _, again := r.poisoned[tp.id]; !again && !t.done(tp.p) && len(r.poisoned) < maxPoisoned {
				r.poisoned[tp.id] = tp.ps
			}
		}
	}
	clear(r.taken)
	r.taken = r.taken[:0]
	if refused := t.deadLetterRefusal(); refused != nil && failure != nil {
		return refused
	}
	return failure
}

// stopSource stops the source, once the run's failure is settled, and
// waits for its Run to return: the source reports the last checkpoint as
// it stops. An error it returns then is its stopping's business on a stop
// asked for, unless it is one no new run could get past (its slot lost,
// say): Run returns a stop even then.
func (run *run) stopSource(ctx context.Context, d decision, failure error) (decision, error) {
	run.srcStop()
	if run.srcEnded {
		return d, failure
	}
	if err := <-run.srcDone; err != nil && failure == nil {
		if sd := decide(err, run.r.situation(false)); ctx.Err() == nil || sd.verdict == stop {
			return sd, err
		}
	}
	return d, failure
}
