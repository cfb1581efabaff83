package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// RunnerConfig is what a user sets for the runner.
type RunnerConfig struct {
	Routing Routing
	// DeadLetterTopic, when set, receives every event that can never be
	// published to its own topic (an illegal topic name, a record larger
	// than the broker accepts), with headers saying why, and the relay goes
	// on. Empty, the default, stops the relay with an error naming the event.
	DeadLetterTopic string
	// ShutdownTimeout bounds how long a graceful stop waits for Kafka to
	// acknowledge what is in flight. Default 30s.
	ShutdownTimeout time.Duration
	// RetryMin and RetryMax bound the exponential backoff between restarts
	// after a lost connection or a failed produce. Defaults 500ms and 30s.
	RetryMin time.Duration
	RetryMax time.Duration
	// TransactionInterval is how long a Kafka transaction stays open, with
	// a [Transactional] sink, before the runner commits it at the next
	// batch that carries a checkpoint. Default 100ms.
	TransactionInterval time.Duration
}

func (c *RunnerConfig) SetDefaults() {
	c.Routing = c.Routing.WithDefaults()
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.RetryMin == 0 {
		c.RetryMin = 500 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.TransactionInterval == 0 {
		c.TransactionInterval = 100 * time.Millisecond
	}
}

// Validate reports every problem with c at once.
func (c *RunnerConfig) Validate() error {
	var errs []error
	if err := c.Routing.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("routing: %w", err))
	}
	if c.DeadLetterTopic != "" {
		if err := ValidTopic(c.DeadLetterTopic); err != nil {
			errs = append(errs, fmt.Errorf("dead letter topic: %w", err))
		}
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown timeout %s is negative", c.ShutdownTimeout))
	}
	if c.TransactionInterval < 0 {
		errs = append(errs, fmt.Errorf("transaction interval %s is negative", c.TransactionInterval))
	}
	if c.RetryMin < 0 || c.RetryMax < c.RetryMin {
		errs = append(errs, fmt.Errorf("retry backoff %s..%s: need 0 <= min <= max", c.RetryMin, c.RetryMax))
	}
	return errors.Join(errs...)
}

// Option wires a runner to its surroundings.
type Option func(*Runner)

// WithRouter replaces the routing of RunnerConfig.Routing with r, for
// record formats beyond it (Debezium's converters, say).
func WithRouter(rt Router) Option { return func(r *Runner) { r.router = rt } }

// WithNullKeys routes an event whose aggregate id column is NULL
// ([Event.AggregateIDNull]) instead of treating it as invalid: for a
// router that makes a record with a null key of it, as Debezium's outbox
// router does. Kafka gives such records no key to partition by: each goes
// to the partition the producer's sticky partitioner picks, so events
// without a key keep no order among themselves or with any aggregate's.
func WithNullKeys() Option { return func(r *Runner) { r.nullKeys = true } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// Runner joins a [Source] to a [Sink]: it routes each event to a message,
// publishes it, and reports acknowledgements back to the source in order.
// The source keeps reading while earlier batches are in flight; the sink's
// buffer bounds how much is in flight.
type Runner struct {
	cfg    RunnerConfig
	src    Source
	sink   Sink
	router Router
	// nullKeys: events with a NULL aggregate id go to the router.
	nullKeys bool
	log      *slog.Logger

	// poisoned remembers events whose publication failed for good after
	// they were handed to the sink, so that when the source delivers them
	// again after the restart they are published alone, to learn whether
	// the failure was theirs, and go to the dead letter topic if it was.
	poisoned map[string]poison
	// taken are the entries of poisoned that this run acted on: when the
	// run fails before their batches are done (a later event's refusal
	// aborts the Kafka transaction they are in, say), they go back, so
	// that the next run does not start over with them.
	taken []takenPoison

	// msg is the message being published, one for every event: a Message
	// per event escaped to the heap (Publish takes a pointer), and Publish
	// does not keep it.
	msg Message

	// txn is the sink when it publishes in transactions, else nil.
	txn Transactional
}

// poison is what the runner knows of an event in its poisoned set.
type poison struct {
	err *EventError
	// alone: it failed published on its own in a Kafka transaction, which
	// only an abort can end then, so the dead letter record could not
	// join it: the next run sends it straight to the dead letter topic.
	alone bool
	// deadLetterRefused: the broker refused its dead letter record, so
	// the next run sends the smallest one (fitDeadLetter).
	deadLetterRefused bool
}

type takenPoison struct {
	id string
	ps poison
	p  *pending
}

// maxPoisoned bounds the poisoned set; past it, an event is only detected
// again by failing again.
const maxPoisoned = 1024

// NewRunner returns a runner, or the configuration's problems.
func NewRunner(src Source, sink Sink, cfg RunnerConfig, opts ...Option) (*Runner, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, src: src, sink: sink, router: newCachedRouting(cfg.Routing), log: slog.New(slog.DiscardHandler), poisoned: map[string]poison{}}
	for _, o := range opts {
		o(r)
	}
	if t, ok := sink.(Transactional); ok && t.Transactions() {
		r.txn = t
	}
	return r, nil
}

// Run relays until ctx is cancelled, which is success (nil), or until an
// error that restarting cannot fix. Lost connections and failed produces
// restart the source with exponential backoff from its last checkpoint.
// What becomes of an event that can never be published is decided once,
// by decide: the dead letter topic, else the source's quarantine
// (Batch.Quarantine), else Run returns an error naming the event.
func (r *Runner) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = r.cfg.RetryMin
	bo.MaxInterval = r.cfg.RetryMax
	bo.MaxElapsedTime = 0
	bo.Reset()
	for {
		started := time.Now()
		d, err := r.runOnce(ctx)
		// A stop asked for while the run was ending on an error no new
		// run can get past (a lost slot, say) still returns that error:
		// the relay did not relay, and its exit says so.
		if ctx.Err() != nil && d.verdict != stop {
			return nil
		}
		switch d.verdict {
		case stop:
			if d.refused != nil {
				return r.deadLetterUnwritable(d.refused.cause, d.refused.size, d.refused.refusal)
			}
			return err
		case deadLetter:
			ps := r.poisoned[d.event.EventID] // keeps alone, set as the run failed
			if d.refused != nil {
				ps = poison{alone: true, deadLetterRefused: true}
			}
			ps.err = d.event
			r.poisoned[d.event.EventID] = ps
		case quarantine:
			// The source got past the event, or one attempt nearer to
			// that: not a failure that a longer wait could help.
			bo.Reset()
		}
		if time.Since(started) > time.Minute {
			bo.Reset()
		}
		wait := bo.NextBackOff()
		if d.verdict == quarantine {
			r.log.Warn("the source set aside an event that cannot be published; restarting it", "event_id", d.event.EventID, "origin", d.event.Origin, "retry_in", wait)
		} else {
			r.log.Warn("relay interrupted; restarting from the last checkpoint", "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// runOnce runs the source and publishes what it reads until ctx is
// cancelled or something fails. On cancellation it drains: it stops taking
// batches, waits up to ShutdownTimeout for Kafka to acknowledge what is in
// flight, then stops the source so that it reports the final checkpoint.
// A run that failed is settled (decide) before its source is stopped.
func (r *Runner) runOnce(ctx context.Context) (decision, error) {
	// The source outlives ctx so that it can still take acknowledgements
	// while in-flight messages drain; it stops when srcStop is called.
	srcCtx, srcStop := context.WithCancel(context.WithoutCancel(ctx))
	defer srcStop()
	// Publishing likewise outlives ctx by at most ShutdownTimeout.
	pubCtx, pubStop := context.WithCancel(context.WithoutCancel(ctx))
	defer pubStop()
	stopTimer := context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.ShutdownTimeout, pubStop) })
	defer stopTimer()

	// Without Kafka transactions, a publish waiting for room in a full
	// producer ends with its source: once the source has lost its
	// connection, what the publish would still send may land after the
	// events of an instance that took over (the drop below). With
	// transactions, fencing refuses those, and publishing goes on.
	sendCtx, srcGone := pubCtx, context.CancelFunc(func() {})
	if r.txn == nil {
		sendCtx, srcGone = context.WithCancel(pubCtx)
		defer srcGone()
	}
	out := make(chan Batch)
	srcDone := make(chan error, 1)
	go func() {
		srcDone <- r.src.Run(srcCtx, out)
		srcGone()
	}()

	t := newTracker()
	var failure error
	srcEnded := false
	tx := r.newTxnState(t)
	defer tx.stop()
	// stopping is ctx's end until it comes; midTxn: the last batch taken
	// ended inside a source transaction (it has no Done).
	stopping, midTxn := ctx.Done(), false
loop:
	for {
		select {
		case b := <-out:
			if err := r.publish(sendCtx, t, b, tx); err != nil {
				failure = err
				break loop
			}
			if err := tx.published(pubCtx, b, t); err != nil {
				failure = err
				break loop
			}
			midTxn = b.Done == nil
			if stopping == nil && !midTxn {
				break loop // the transaction the stop waited for is whole
			}
		case <-tx.tick:
			if err := tx.due(pubCtx, t); err != nil {
				failure = err
				break loop
			}
		case err := <-t.failures:
			failure = err
			break loop
		case err := <-srcDone:
			srcEnded, failure = true, sourceEnded(err)
			break loop
		case <-stopping:
			if !midTxn {
				break loop
			}
			// Part of a source transaction is on its way to Kafka, and
			// only its end can be confirmed: take the rest of it, within
			// ShutdownTimeout, rather than publish that part again on the
			// next start.
			stopping = nil
		case <-pubCtx.Done():
			break loop
		}
	}

	if failure != nil && !srcEnded && sendCtx.Err() != nil && pubCtx.Err() == nil {
		// The loop ended on a publish that the source's end cut short: the
		// source's error is the failure, as if the loop had seen it first.
		srcEnded, failure = true, sourceEnded(<-srcDone)
	}

	// Drain what is in flight on a graceful stop. When the source lost its
	// connection, another instance may have taken over what it reads (a
	// standby, after this one was frozen or cut off): without Kafka
	// transactions nothing fences this one, so it drops the records it
	// has not sent yet rather than write them after the other's, and
	// publishes them again from its checkpoint. What was already on its
	// way still lands. With transactions, what ends at a checkpoint is
	// committed; a successor's fencing refuses it.
	drained := false
	if failure == nil || (srcEnded && r.txn != nil) {
		flushCtx, cancel := pubCtx, context.CancelFunc(func() {})
		if srcEnded {
			flushCtx, cancel = context.WithTimeout(pubCtx, r.cfg.ShutdownTimeout)
		}
		var err error
		if r.txn != nil {
			// What ends at a checkpoint is committed; a transaction cut
			// in the middle of a source transaction is aborted below, and
			// published again from the checkpoint.
			err = tx.finish(flushCtx)
		} else {
			err = r.sink.Flush(flushCtx)
		}
		cancel()
		drained = err == nil
		if err != nil && failure != nil && r.txn != nil {
			r.log.Warn("the open Kafka transaction could not be committed and is aborted; its events are published again from the checkpoint", "err", err)
		}
		if err != nil && failure == nil {
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
		if srcEnded && r.txn == nil {
			r.log.Info("the source lost its connection: dropping the events not yet sent to Kafka rather than sending them, in case another instance has taken over; they are published again from the checkpoint",
				"in_flight", t.inFlight(), "err", failure)
		}
		// Fail whatever is still buffered so every Done is called and the
		// sink starts clean on the next run.
		abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := r.sink.Abort(abortCtx); err != nil {
			r.log.Warn("abort buffered events", "err", err)
		}
		cancel()
		tx.release(t, errTxnAborted)
	}
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
		// Whichever error ended the run (in a Kafka transaction, the
		// commit's), the refused dead letter is what the next run must
		// know of.
		failure = refused
	}
	var d decision
	if failure != nil {
		d, failure = r.settle(ctx, t, failure)
	}
	srcStop()
	if !srcEnded {
		// An error the source ends with once told to stop is its stopping's
		// business on a stop asked for, unless it is one no new run could
		// get past (its slot lost, say): Run returns a stop even then.
		if err := <-srcDone; err != nil && failure == nil {
			if sd := decide(err, r.situation(false)); ctx.Err() == nil || sd.verdict == stop {
				failure, d = err, sd
			}
		}
	}
	return d, failure
}

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

// sourceEnded is the failure of a source whose Run returned err while the
// runner still wanted its batches.
func sourceEnded(err error) error {
	if err == nil {
		return errors.New("source stopped without being asked to")
	}
	return err
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
	if !errors.As(err, &tl) || tl.Limit == 0 {
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
// check) is remembered in t, as the reason this run fails.
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
		p.ack(err)
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

// RecordTooLargeError says a record is larger than the broker accepts.
type RecordTooLargeError struct {
	Size int
	// Limit is the limit the relay checked against; 0 when the broker
	// refused the record itself (Cause is its error).
	Limit int
	Cause error
}

func (e *RecordTooLargeError) Error() string {
	if e.Limit == 0 {
		return fmt.Sprintf("the broker refused the record (%d bytes) as larger than the topic's max.message.bytes: %v; make the payload smaller or raise the limit", e.Size, e.Cause)
	}
	return fmt.Sprintf("record is %d bytes, more than the broker's limit of %d (message.max.bytes / max.message.bytes); make the payload smaller or raise the limit", e.Size, e.Limit)
}

func (e *RecordTooLargeError) Unwrap() error { return e.Cause }
