package connector

import (
	"context"
	"errors"
	"sync"
)

// tracker turns per-message acknowledgements, which arrive per partition and
// so out of order across partitions, into in-order Done calls for batches:
// a batch is done only once it and every batch received before it are fully
// acknowledged. Its queue holds one entry per batch that still has a
// message in the sink, so it is bounded by the sink's buffer.
type tracker struct {
	mu     sync.Mutex
	queue  []*pending
	failed error
	// failures gets the first error of any message, as soon as it is
	// known, so the runner can stop publishing.
	failures chan error
	// first is that first error, once reported there; firstInBatch: it
	// came with the broker's answer for a batch (ackInBatch).
	first        error
	firstInBatch bool
	inflight     int
	// deadLetter is the first dead letter record the broker refused.
	deadLetter *deadLetterRefusedError
	// quarantine is the Batch.Quarantine of the batch that first failed,
	// with the error first.
	quarantine func(context.Context, *EventError) error
}

type pending struct {
	// remaining counts messages not yet acknowledged, plus one while the
	// runner is still publishing the batch.
	remaining int
	err       error
	done      func(error)
	// ack records the outcome of one message of this batch that the sink
	// may have sent with others (ackInBatch): the sink's done callback
	// for each of them, made once per batch rather than once per message.
	ack func(error)
	// ok: the batch is done, and Done was called with nil.
	ok bool
	// quarantine is the batch's Quarantine; set before any of its
	// messages is sent.
	quarantine func(context.Context, *EventError) error
}

func newTracker() *tracker {
	return &tracker{failures: make(chan error, 1)}
}

// add registers a batch the runner has received and is about to publish.
func (t *tracker) add(done func(error)) *pending {
	p := &pending{remaining: 1, done: done}
	p.ack = func(err error) { t.ackInBatch(p, err) }
	t.mu.Lock()
	t.queue = append(t.queue, p)
	t.mu.Unlock()
	return p
}

// sent counts one more message of p handed to the sink.
func (t *tracker) sent(p *pending) {
	t.mu.Lock()
	p.remaining++
	t.inflight++
	t.mu.Unlock()
}

// acked records the outcome of one message of p that was sent on its own
// (or not sent at all: a nil error taking back the count).
func (t *tracker) acked(p *pending, err error) {
	t.mu.Lock()
	t.inflight--
	t.settle(p, err, false)
	t.mu.Unlock()
}

// ackInBatch records the outcome of one message of p that the broker may
// have answered for together with others: it answers for a whole batch,
// so an error it gives may be another record's fault.
func (t *tracker) ackInBatch(p *pending, err error) {
	t.mu.Lock()
	t.inflight--
	t.settle(p, err, true)
	t.mu.Unlock()
}

// published records that the runner has handed every message of p to the
// sink, or stopped early with err.
func (t *tracker) published(p *pending, err error) {
	t.mu.Lock()
	t.settle(p, err, false)
	t.mu.Unlock()
}

func (t *tracker) settle(p *pending, err error, inBatch bool) {
	p.remaining--
	if err != nil && p.err == nil {
		p.err = err
	}
	if err != nil && t.first == nil {
		t.first, t.firstInBatch = err, inBatch
		t.quarantine = p.quarantine
		t.failures <- err
	}
	for len(t.queue) > 0 && t.queue[0].remaining == 0 {
		head := t.queue[0]
		t.queue[0] = nil
		t.queue = t.queue[1:]
		if head.err != nil && t.failed == nil {
			t.failed = head.err
		}
		head.ok = t.failed == nil
		// Once a batch has failed, no later batch is done either: Done(nil)
		// would promise that everything before it is in Kafka.
		if head.done != nil {
			head.done(t.failed)
		}
	}
	if len(t.queue) == 0 {
		t.queue = t.queue[:0:0] // let the old backing array go
	}
}

// err is the first error of any message so far, or nil.
func (t *tracker) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first
}

// quarantineFor is the Quarantine of the batch that holds the event ee
// names, when that event's failure is the first of this run (a later
// error, a Kafka transaction's abort, may wrap it anew) and the batch has
// one.
func (t *tracker) quarantineFor(ee *EventError) func(context.Context, *EventError) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first *EventError
	if !errors.As(t.first, &first) || first.EventID != ee.EventID {
		return nil
	}
	return t.quarantine
}

// refusedInBatch reports whether the run's first failure is the event ee
// names, refused with the broker's answer for a batch (ackInBatch) rather
// than on its own: the refusal may then be a neighbour's.
func (t *tracker) refusedInBatch(ee *EventError) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first *EventError
	return t.firstInBatch && errors.As(t.first, &first) && first.EventID == ee.EventID
}

// inFlight is the number of messages handed to the sink and not yet
// acknowledged.
func (t *tracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inflight
}

// done reports whether p is done and its Done was called with nil.
func (t *tracker) done(p *pending) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return p.ok
}

// refuseDeadLetter records the broker's refusal of a dead letter record.
func (t *tracker) refuseDeadLetter(e *deadLetterRefusedError) {
	t.mu.Lock()
	if t.deadLetter == nil {
		t.deadLetter = e
	}
	t.mu.Unlock()
}

// deadLetterRefusal is the first dead letter record refused, or nil.
func (t *tracker) deadLetterRefusal() *deadLetterRefusedError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadLetter
}
