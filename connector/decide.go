package connector

import (
	"context"
	"errors"
	"fmt"
)

// verdict is what the runner does after a run that ended with an error.
type verdict int

const (
	// restart the source from its last checkpoint, after the backoff: a
	// lost connection or a failed produce, which a new run may not meet.
	restart verdict = iota
	// stop the relay with the error: no new run can get past it.
	stop
	// deadLetter: restart, and send the event to the dead letter topic
	// when the source offers it again (the poisoned set).
	deadLetter
	// quarantine: the source sets the event aside in its own store
	// (Batch.Quarantine), then restarts.
	quarantine
	// tryAlone: restart, and publish the event alone when the source offers
	// it again (the poisoned set): the broker refused the batch it was
	// in, and the refusal may be a neighbour's. Failing alone, it meets
	// the other verdicts.
	tryAlone
)

func (v verdict) String() string {
	switch v {
	case restart:
		return "restart"
	case stop:
		return "stop"
	case deadLetter:
		return "dead letter"
	case quarantine:
		return "quarantine"
	case tryAlone:
		return "try alone"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// decision is what becomes of a run's error.
type decision struct {
	verdict verdict
	// event is the event that can never be published, for deadLetter and
	// quarantine, and for stop when a dead letter could not be written;
	// for tryAlone, the suspect.
	event *EventError
	// refused: the broker refused the event's dead letter record. With
	// deadLetter the next run sends the smallest one; with stop the
	// smallest one was refused too.
	refused *deadLetterRefusedError
}

// situation is what decide needs to know besides the error.
type situation struct {
	// deadLetterTopic: the relay has one (kafka.dead_letter_topic).
	deadLetterTopic bool
	// room: the poisoned set can take one more event.
	room bool
	// canQuarantine: the batch of the event the error names has a
	// Quarantine, and the event's failure is the run's first.
	canQuarantine bool
	// inBatch: the event the error names was refused with the broker's
	// answer for a batch, not on its own (tracker.refusedInBatch).
	inBatch bool
}

// decide is the one place that says what becomes of a run that ended with
// err, and so of an event that can never be published. In order:
//   - a dead letter record the broker refused: the next run sends the
//     smallest one; if that was refused too, stop (nothing can account
//     for the event);
//   - an error marked [Permanent]: stop;
//   - an event the broker refused with a batch: published alone by the
//     next run, whatever the dead letter setting, since the refusal may
//     be a neighbour's (a record too large for a topic whose own limit
//     the relay did not know yet): an innocent event is neither dead
//     lettered, quarantined nor named in a stop;
//   - an event that can never be published ([*EventError]): to the dead
//     letter topic if there is one (stop when the poisoned set is full:
//     it could only fail again); else into the source's quarantine if
//     its batch has one; else stop, naming the event;
//   - anything else: restart.
//
// Exactly-once publishing decides nothing here: an event that failed
// alone in a Kafka transaction is condemned (Runner.condemn) before the
// run ends, and reaches decide as any other event error.
func decide(err error, s situation) decision {
	var refused *deadLetterRefusedError
	var pe permanentError
	var ee *EventError
	switch {
	case errors.As(err, &refused):
		switch {
		case refused.minimal:
			return decision{verdict: stop, event: refused.cause, refused: refused}
		case s.room:
			// The event's fate was settled before its dead letter was
			// refused: the next run sends the smallest one.
			return decision{verdict: deadLetter, event: refused.cause, refused: refused}
		}
		return decision{verdict: restart}
	case errors.As(err, &pe):
		return decision{verdict: stop}
	case !errors.As(err, &ee):
		return decision{verdict: restart}
	case s.inBatch && s.room:
		return decision{verdict: tryAlone, event: ee}
	case s.deadLetterTopic && s.room:
		return decision{verdict: deadLetter, event: ee}
	case s.deadLetterTopic:
		return decision{verdict: stop, event: ee}
	case s.canQuarantine:
		return decision{verdict: quarantine, event: ee}
	}
	return decision{verdict: stop, event: ee}
}

// quarantineError is a Batch.Quarantine that failed. It wraps that error,
// not the event's: decide then restarts (the source offers the event
// again) or, when the quarantine's error is permanent, stops with it.
type quarantineError struct {
	event *EventError
	err   error
}

func (e *quarantineError) Error() string {
	return fmt.Sprintf("set aside %v: %v", e.event, e.err)
}

func (e *quarantineError) Unwrap() error { return e.err }

// settle decides what becomes of a run that ended with failure and, when
// the event goes to the source's quarantine, puts it there: after every
// Done of the run was called and before the source is stopped, while it
// still holds the event's batch (Batch.Quarantine).
func (r *Runner) settle(ctx context.Context, t *tracker, failure error) (decision, error) {
	var q func(context.Context, *EventError) error
	inBatch := false
	if ee := (*EventError)(nil); errors.As(failure, &ee) {
		q, inBatch = t.quarantineFor(ee), t.refusedInBatch(ee)
	}
	s := r.situation(q != nil)
	s.inBatch = inBatch
	d := decide(failure, s)
	if d.verdict != quarantine {
		return d, failure
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	defer cancel()
	if err := q(qctx, d.event); err != nil {
		failure = &quarantineError{event: d.event, err: err}
		return decide(failure, r.situation(false)), failure
	}
	return d, failure
}

func (r *Runner) situation(canQuarantine bool) situation {
	return situation{
		deadLetterTopic: r.cfg.DeadLetterTopic != "",
		room:            len(r.poisoned) < maxPoisoned,
		canQuarantine:   canQuarantine,
	}
}
