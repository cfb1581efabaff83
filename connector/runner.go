package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// obs is told what the runner does (WithObserver).
	obs Observer

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
	r := &Runner{cfg: cfg, src: src, sink: sink, router: newCachedRouting(cfg.Routing), log: slog.New(slog.DiscardHandler), obs: noObserver{}, poisoned: map[string]poison{}}
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
		case deadLetter, tryAlone:
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
		r.obs.RunFailed(err, wait)
		r.logRestart(d, err, wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// logRestart says, in one line, why the runner starts the source again
// after wait: an event set aside, a service it cannot connect to (named,
// with its address), or a run that was interrupted.
func (r *Runner) logRestart(d decision, err error, wait time.Duration) {
	var ce *ConnectError
	switch {
	case d.verdict == quarantine:
		r.log.Warn("the source set aside an event that cannot be published; restarting it", "event_id", d.event.EventID, "origin", d.event.Origin, "retry_in", wait)
	case d.verdict == tryAlone:
		r.log.Warn("the broker refused a batch; restarting, and publishing this event of it alone to learn whether the refusal is its own",
			"event_id", d.event.EventID, "origin", d.event.Origin, "err", d.event.Err, "retry_in", wait)
	case errors.As(err, &ce):
		r.log.Warn("cannot connect to "+ce.Service+"; retrying", "addr", ce.Addr, "err", ce.Err, "retry_in", wait)
	default:
		r.log.Warn("relay interrupted; restarting from the last checkpoint", "err", err, "retry_in", wait)
	}
}

// runOnce is one run of the source, in named steps: it starts the source,
// relays what it reads until ctx is cancelled or something fails, drains
// what is in flight (or drops it, after a failure), carries over to the
// next run what it must know, settles a failure (decide) while the source
// still holds its batches, and only then stops the source, which reports
// the final checkpoint as it stops.
func (r *Runner) runOnce(ctx context.Context) (decision, error) {
	run := r.startRun(ctx)
	defer run.close()
	failure := run.relay(ctx)
	failure = run.drain(ctx, failure)
	failure = r.carryOver(run.t, failure)
	var d decision
	if failure != nil {
		d, failure = r.settle(ctx, run.t, failure)
	}
	return run.stopSource(ctx, d, failure)
}

// run is what the steps of one runOnce share.
type run struct {
	r  *Runner
	t  *tracker
	tx *txnState

	out chan Batch
	// srcDone receives what the source's Run returned; srcEnded: it was
	// received, and the source's end is the run's failure.
	srcDone  chan error
	srcEnded bool

	// srcCtx is the source's. It outlives ctx, so that the source still
	// takes the acknowledgements of what drains, and ends when stopSource
	// cancels it.
	srcCtx  context.Context
	srcStop context.CancelFunc
	// pubCtx is publishing's, the drain's included. It outlives ctx, or a
	// source that ended while the run wanted its batches, by at most
	// ShutdownTimeout: deadline arms that bound, once, at whichever comes
	// first.
	pubCtx   context.Context
	pubStop  context.CancelFunc
	deadline func()
	unwatch  func() bool
	// sendCtx is the one Publish gets. Without Kafka transactions it ends
	// too when the source's Run returns (srcGone): once the source has lost
	// its connection, what a publish waiting for room in a full producer
	// would still send may land after the events of an instance that took
	// over (see drain). With transactions, fencing refuses those, and it is
	// pubCtx.
	sendCtx context.Context
	srcGone context.CancelFunc
}

// startRun starts the source's Run in a goroutine of its own.
func (r *Runner) startRun(ctx context.Context) *run {
	run := &run{r: r, t: newTracker(), out: make(chan Batch), srcDone: make(chan error, 1)}
	run.tx = r.newTxnState(run.t)
	run.srcCtx, run.srcStop = context.WithCancel(context.WithoutCancel(ctx))
	run.pubCtx, run.pubStop = context.WithCancel(context.WithoutCancel(ctx))
	run.deadline = sync.OnceFunc(func() { time.AfterFunc(r.cfg.ShutdownTimeout, run.pubStop) })
	run.unwatch = context.AfterFunc(ctx, run.deadline)
	run.sendCtx, run.srcGone = run.pubCtx, func() {}
	if r.txn == nil {
		run.sendCtx, run.srcGone = context.WithCancel(run.pubCtx)
	}
	r.obs.SourceStarted()
	go func() {
		err := r.src.Run(run.srcCtx, run.out)
		r.obs.SourceStopped(err)
		run.srcGone()
		run.srcDone <- err
	}()
	return run
}

// close releases what startRun made, once the source's Run has returned.
func (run *run) close() {
	run.unwatch()
	run.tx.stop()
	run.srcGone()
	run.pubStop()
	run.srcStop()
}

// relay takes the source's batches and publishes them until ctx is
// cancelled, something fails, or publishing's time is up. It returns the
// failure, nil on a stop. A stop that comes while part of a source
// transaction is on its way to Kafka first takes the rest of it, within
// ShutdownTimeout: only a transaction's end can be confirmed, and that
// part would be published again on the next start.
func (run *run) relay(ctx context.Context) error {
	// stopping is ctx's end until it comes; midTxn: the last batch taken
	// ended inside a source transaction (it has no Done).
	stopping, midTxn := ctx.Done(), false
	for {
		select {
		case b := <-run.out:
			if err := run.take(b); err != nil {
				return run.failed(err)
			}
			midTxn = b.Done == nil
			if stopping == nil && !midTxn {
				return nil // the transaction the stop waited for is whole
			}
		case <-run.tx.tick:
			if err := run.tx.due(run.pubCtx, run.t); err != nil {
				return run.failed(err)
			}
		case err := <-run.t.failures:
			return run.failed(err)
		case err := <-run.srcDone:
			run.srcEnded = true
			return sourceEnded(err)
		case <-stopping:
			if !midTxn {
				return nil
			}
			stopping = nil
		case <-run.pubCtx.Done():
			return nil
		}
	}
}

// take publishes b, a batch the source handed on, and commits the open
// Kafka transaction when b makes it due.
func (run *run) take(b Batch) error {
	obs := run.r.obs
	obs.BatchTaken(len(b.Events))
	defer obs.BatchHandedOver()
	if err := run.r.publish(run.sendCtx, run.t, b, run.tx); err != nil {
		return err
	}
	return run.tx.published(run.pubCtx, b, run.t)
}

// failed is the failure of a relay that err stopped. When the source's end
// cut a publish short (sendCtx), the source's error is the failure, as if
// the loop had seen it first.
func (run *run) failed(err error) error {
	if run.sendCtx.Err() != nil && run.pubCtx.Err() == nil {
		run.srcEnded = true
		return sourceEnded(<-run.srcDone)
	}
	return err
}

// sourceEnded is the failure of a source whose Run returned err while the
// runner still wanted its batches.
func sourceEnded(err error) error {
	if err == nil {
		return errors.New("source stopped without being asked to")
	}
	return err
}
