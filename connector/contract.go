package connector

import (
	"context"
	"time"
)

// Batch is a run of events in commit order, handed from a [Source] to the
// [Runner].
type Batch struct {
	Events []Event
	// Done, when not nil, is called exactly once for every batch the runner
	// has received: with nil once Kafka has acknowledged every event of this
	// batch and of every batch received before it, or with the error that
	// stopped that from happening. Calls come in the order the batches were
	// received, from any goroutine, and must not block: record the outcome
	// and return. A batch that ends in the middle of a transaction has no
	// Done, since the source cannot advance to its end.
	Done func(err error)
	// Checkpoint, when not nil, returns the record that says the source
	// got to the end of this batch, for a [Transactional] sink: the runner
	// publishes it in the same Kafka transaction as this batch and every
	// batch before it, when it commits right after this batch. A source
	// sets it only on a batch that ends where it could resume (at the end
	// of a source transaction); a batch without one cannot end a Kafka
	// transaction. A batch may have no events and only a Checkpoint, to
	// move the checkpoint while nothing is published.
	Checkpoint func() (*Message, error)
	// Prepare, when not nil, is for a source that records what was
	// published in its own store rather than in a checkpoint (the poller
	// marks its rows in the claim's PostgreSQL transaction). With a
	// [Transactional] sink the runner commits the Kafka transaction right
	// after this batch, and calls Prepare once every message of it has
	// been acknowledged, just before the commit: the source writes its
	// record there, without committing it, which also proves it still
	// holds what it read. A non-nil error aborts the Kafka transaction.
	// Once Done(nil) says the Kafka transaction committed, the source
	// commits its own. Prepare is called from the runner's goroutine, at
	// most once, and never without a transactional sink.
	Prepare func(ctx context.Context) error
	// Quarantine, when not nil, is how the source sets aside, in a store
	// of its own, an event of this batch that can never be published:
	// the poller records a failed attempt on the event's row, and on the
	// row's last attempt (poll.max_attempts, made alone) moves it to its
	// dead-letter table. The runner decides whether to call it (see
	// [Runner.Run]): only when the relay has no dead letter topic, and
	// only for the [*EventError] that ended the run, which names an event
	// of this batch and was its own: an event the broker refused with a
	// batch is first published alone by the next run, and only a refusal
	// of it alone is quarantined. It calls it at most once, from its goroutine, after
	// this batch's Done was called with an error and before it cancels
	// the context of the source's Run: a source that quarantines keeps
	// what a failed batch holds (its rows locked, say) until one or the
	// other. A nil error promises that the source recorded the failure,
	// so that its next Run makes progress past the event: it offers the
	// event again, alone, with one attempt fewer left, or no longer at
	// all; the runner then starts it again. A non-nil error means nothing
	// was recorded (the event is not in this batch, the store could not
	// be written); one marked with [Permanent] stops the relay, any other
	// restarts the source, which offers the event again.
	Quarantine func(ctx context.Context, cause *EventError) error
}

// Source reads committed outbox events.
//
// The runner calls Run, and after Run returns it may call Run again to
// reconnect; it never runs two calls of one Source at once.
type Source interface {
	// Run sends batches to out in commit order; events of one aggregate
	// must be sent in the order their transactions committed. A send on
	// out blocks while the runner is busy; a batch that was not taken by
	// the runner was not received, and the source must offer it again on
	// the next Run. Run returns nil once ctx is cancelled, after releasing
	// its connections and reporting the last checkpoint it was given, and
	// an error when it loses its connection or cannot go on; an error that
	// no reconnect can fix is marked with [Permanent].
	Run(ctx context.Context, out chan<- Batch) error
}

// Sink publishes messages to Kafka.
//
// Publish is called from one goroutine; Flush and Abort may be called from
// another while Publish blocks.
type Sink interface {
	// Publish hands m to Kafka. It may block while the sink's buffer is
	// full, until ctx is done. A nil error promises that done will be
	// called exactly once, from any goroutine, with nil when Kafka has
	// acknowledged m with acks=all or with the error that made it give up;
	// calls for messages of one topic and key come in Publish order. A
	// non-nil error means m was not sent and done will not be called;
	// it is an [*EventError] when m can never be published (too large for
	// the broker, say). Publish reads m only during the call (its slices
	// it may keep): the runner reuses one Message for every event.
	Publish(ctx context.Context, m *Message, done func(error)) error
	// Flush waits until done has been called for every message published
	// so far, or ctx is done.
	Flush(ctx context.Context) error
	// Abort fails every message not yet acknowledged, calling its done
	// with an error, and readies the sink to publish again.
	Abort(ctx context.Context) error
}

// Transactional is a [Sink] that can publish in Kafka transactions
// (kafka.delivery exactly_once), so that read_committed consumers see each
// event once: a transaction commits the events with the checkpoint that
// covers them, and one that fails is aborted whole.
//
// Transactions is called once, before the first Publish. Commit is called
// from the goroutine that calls Publish, never during a Publish.
type Transactional interface {
	Sink
	// Transactions reports whether the sink publishes in transactions.
	Transactions() bool
	// Commit publishes mark (the checkpoint) and commits it with every
	// message published since the last Commit, in one transaction. A
	// message's done is called with nil only then; a message the broker
	// refused has its done called with the error at once, and the
	// transaction can then only abort: Commit aborts it and calls the
	// other dones with an error. Abort aborts the open transaction.
	Commit(ctx context.Context, mark *Message) error
}

// Backlog is what waits in one outbox table of a source that can count it
// (the poller): the rows not yet published, and when the oldest of them
// was committed (zero when none waits, or when the source cannot tell).
type Backlog struct {
	Table  string // schema.table
	Events int64
	Oldest time.Time
}
