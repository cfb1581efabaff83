package connector

import (
	"context"
	"errors"
	"fmt"
)

// publish routes and publishes every event of b.
func (r *Runner) publish(ctx context.Context, t *tracker, b Batch, tx *txnState) error {
	p := t.add(b.Done)
	p.quarantine = b.Quarantine // before any message of b is sent
	tx.hold(t, p, b)
	m := &r.msg
	for i := range b.Events {
		e := &b.Events[i]
		var err error
		ps, suspect := r.poisoned[e.ID]
		if suspect {
			delete(r.poisoned, e.ID)
			r.taken = append(r.taken, takenPoison{id: e.ID, ps: ps, p: p})
		}
		*m, err = Message{}, e.Invalid
		if err != nil && e.onlyNullKey && r.nullKeys {
			err = nil
		}
		if err == nil {
			*m, err = r.router.Route(ctx, e)
			m.Stages = e.Stages
		}
		if err == nil && m.Filtered {
			// A Filter transform dropped it: published, as Kafka
			// Connect counts a record a transform drops.
			continue
		}
		if err == nil {
			switch {
			case !suspect:
				err = r.send(ctx, t, p, m)
			case ps.alone:
				err = ps.err
			case r.txn != nil:
				if err = r.sendAloneInTxn(ctx, t, p, m); err != nil {
					r.condemn(err)
					t.published(p, err)
					return err
				}
				continue
			default:
				if err = r.sendAlone(ctx, m); err == nil {
					continue
				}
			}
		}
		if err != nil {
			err = r.deadLetterOrFail(ctx, t, p, e, m, err, ps.deadLetterRefused)
		}
		if err != nil {
			t.published(p, err)
			return err
		}
	}
	t.published(p, nil)
	return nil
}

// deadLetterOrFail sends e to the dead letter topic when err says it can
// never be published and there is one; otherwise it returns err. (Apart
// from publish so that the error's target, which escapes to the heap,
// costs an allocation only when there is an error.) minimal: the broker
// refused e's dead letter record in an earlier run, so it sends the
// smallest one.
//
// A dead letter record larger than the topic takes is cut to fit
// (fitDeadLetter): the sink refuses it before sending anything, naming the
// limit, so trying again is safe in a Kafka transaction too. One that
// cannot fit stops the relay: restarting could only fail the same way.
func (r *Runner) deadLetterOrFail(ctx context.Context, t *tracker, p *pending, e *Event, m *Message, err error, minimal bool) error {
	var ee *EventError
	if !errors.As(err, &ee) || r.cfg.DeadLetterTopic == "" {
		return err
	}
	dl := r.deadLetter(e, m, ee)
	if minimal {
		fitDeadLetter(dl, 0)
	}
	r.log.Error("event cannot be published; sending it to the dead letter topic",
		"event_id", e.ID, "origin", e.Origin, "dead_letter_topic", dl.Topic, "err", Shorten(ee.Err.Error(), DeadLetterHeaderBytes), "omitted", omitted(dl))
	err = r.sendDeadLetter(ctx, t, p, dl, ee, minimal)
	var tl *RecordTooLargeError
	var dlErr *EventError
	switch {
	case errors.As(err, &tl) && tl.Limit != 0:
	case errors.As(err, &dlErr):
		// The sink refused the dead letter record before sending it,
		// for a reason of its own (the dead letter topic could not be
		// created, say): another run would only be refused again.
		return Permanent(&EventError{EventID: e.ID, Origin: e.Origin, Err: fmt.Errorf(
			"cannot be published (%s), and its dead letter record cannot be written to %s either: %w",
			Shorten(ee.Err.Error(), DeadLetterHeaderBytes), dl.Topic, dlErr.Err)})
	default:
		return err
	}
	if !fitDeadLetter(dl, tl.Limit) {
		return r.deadLetterUnwritable(ee, dl.Size(), fmt.Errorf("topic %s takes records of at most %d bytes", dl.Topic, tl.Limit))
	}
	r.log.Warn("the dead letter record is larger than its topic takes; sending it without what does not fit",
		"event_id", e.ID, "dead_letter_topic", dl.Topic, "limit", tl.Limit, "omitted", omitted(dl))
	if err = r.sendDeadLetter(ctx, t, p, dl, ee, minimal); errors.As(err, &tl) {
		return r.deadLetterUnwritable(ee, dl.Size(), err)
	}
	return err
}

// sendDeadLetter is send for the dead letter record dl of the event that
// cause names. A refusal of dl by the broker (it passed the sink's own
// check) is remembered in t, as the reason this run fails; its
// acknowledgement is told to the Observer.
func (r *Runner) sendDeadLetter(ctx context.Context, t *tracker, p *pending, dl *Message, cause *EventError, minimal bool) error {
	size := dl.Size()
	t.sent(p)
	err := r.sink.Publish(ctx, dl, func(err error) {
		// In a Kafka transaction, a record aborted for another's refusal
		// carries that one's error, naming the other event.
		if ee := (*EventError)(nil); errors.As(err, &ee) && ee.EventID == cause.EventID {
			refused := &deadLetterRefusedError{cause: cause, refusal: err, minimal: minimal, size: size}
			t.refuseDeadLetter(refused)
			err = &EventError{EventID: cause.EventID, Origin: cause.Origin, Err: refused}
		}
		if err == nil {
			r.obs.DeadLettered(deadLetterOf(dl, cause))
		}
		p.ack(err)
	})
	if err != nil {
		t.acked(p, nil) // not sent: take back the count without failing p twice
		return err
	}
	return nil
}

// sendAlone publishes a message that failed for good in an earlier run and
// waits for the outcome. The broker answers for whole batches, so the
// failure may have been a neighbour's; alone, the answer is this message's
// own. Everything published before it is flushed first, which keeps order.
// A nil error means it is in Kafka.
func (r *Runner) sendAlone(ctx context.Context, m *Message) error {
	if err := r.sink.Flush(ctx); err != nil {
		return err
	}
	res := make(chan error, 1)
	if err := r.sink.Publish(ctx, m, func(err error) { res <- err }); err != nil {
		return err
	}
	if err := r.sink.Flush(ctx); err != nil {
		return err
	}
	return <-res
}

// sendAloneInTxn is sendAlone in a Kafka transaction, where a refusal
// comes at once and a success only with the commit: after the flush, no
// answer is a success so far. The message counts in p, so that p is done
// only once the transaction commits, as every batch in one is.
func (r *Runner) sendAloneInTxn(ctx context.Context, t *tracker, p *pending, m *Message) error {
	if err := r.sink.Flush(ctx); err != nil {
		return err
	}
	refused := make(chan error, 1)
	t.sent(p)
	err := r.sink.Publish(ctx, m, func(err error) {
		if err != nil {
			refused <- err
		}
		t.acked(p, err) // alone: a refusal is its own
	})
	if err != nil {
		t.acked(p, nil) // not sent: take back the count
		return err
	}
	if err := r.sink.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-refused:
		return err
	default:
		return nil
	}
}

// condemn remembers an event that failed alone in a Kafka transaction
// (poison.alone): this run fails, and the next sends the event straight to
// the dead letter topic.
func (r *Runner) condemn(err error) {
	var ee *EventError
	if errors.As(err, &ee) && r.cfg.DeadLetterTopic != "" && len(r.poisoned) < maxPoisoned {
		r.poisoned[ee.EventID] = poison{err: ee, alone: true}
	}
}

func (r *Runner) send(ctx context.Context, t *tracker, p *pending, m *Message) error {
	t.sent(p)
	if err := r.sink.Publish(ctx, m, p.ack); err != nil {
		t.acked(p, nil) // not sent: take back the count without failing p twice
		return err
	}
	return nil
}
