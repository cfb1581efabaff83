package connector

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errTxnAborted is the outcome of a batch whose Kafka transaction was
// aborted before its checkpoint was committed.
var errTxnAborted = errors.New("the Kafka transaction was aborted; its events are published again from the checkpoint")

// maxTxnMessages bounds the messages of one Kafka transaction: their done
// callbacks wait in memory for the commit, so past it the runner commits
// at the next checkpoint whatever the interval.
const maxTxnMessages = 20000

// txnState is the runner's side of a [Transactional] sink: it commits the
// open transaction at a checkpoint once it has been open for the
// transaction interval, or holds too many messages. With a sink that is
// not transactional it does nothing.
type txnState struct {
	r *Runner
	t *tracker
	// tick wakes the runner to commit a transaction that went quiet; nil
	// without transactions.
	tick   <-chan time.Time
	ticker *time.Ticker
	// mark is the checkpoint of the last batch published, when that batch
	// ended where a transaction may end; nil in the middle of a source
	// transaction.
	mark func() (*Message, error)
	// open: something was published since the last commit; since when.
	open  bool
	since time.Time
	// held are the batches with a checkpoint in the open transaction:
	// each is done only once its checkpoint is committed, even one that
	// has no events.
	held []*pending
}

// hold keeps p, a batch with a checkpoint, from being done before the
// transaction that carries its checkpoint commits.
func (tx *txnState) hold(t *tracker, p *pending, b Batch) {
	if tx.r.txn == nil || b.Checkpoint == nil {
		return
	}
	t.sent(p)
	tx.held = append(tx.held, p)
}

// release settles the held batches with err: nil after a commit, the
// abort's error otherwise.
func (tx *txnState) release(t *tracker, err error) {
	for _, p := range tx.held {
		t.acked(p, err)
	}
	clear(tx.held)
	tx.held = tx.held[:0]
}

func (r *Runner) newTxnState(t *tracker) *txnState {
	tx := &txnState{r: r, t: t}
	if r.txn != nil {
		tx.ticker = time.NewTicker(max(r.cfg.TransactionInterval/4, time.Millisecond))
		tx.tick = tx.ticker.C
	}
	return tx
}

func (tx *txnState) stop() {
	if tx.ticker != nil {
		tx.ticker.Stop()
	}
}

// published records that b was handed to the sink, and commits when the
// transaction is due and b ends at a checkpoint.
func (tx *txnState) published(ctx context.Context, b Batch, t *tracker) error {
	if tx.r.txn == nil {
		return nil
	}
	if !tx.open {
		tx.open, tx.since = true, time.Now()
	}
	tx.mark = b.Checkpoint
	if b.Prepare != nil {
		// The source waits for this batch before it reads on: nothing
		// else will join the transaction, so it commits now.
		return tx.commit(ctx, b.Prepare)
	}
	return tx.due(ctx, t)
}

// due commits if the transaction is open long enough, or large enough,
// and can end here.
func (tx *txnState) due(ctx context.Context, t *tracker) error {
	if !tx.open || tx.mark == nil {
		return nil
	}
	if time.Since(tx.since) < tx.r.cfg.TransactionInterval && t.inFlight() < maxTxnMessages {
		return nil
	}
	return tx.commit(ctx, nil)
}

// commit commits the open transaction, calling prepare (a batch's
// Prepare, when not nil) first.
func (tx *txnState) commit(ctx context.Context, prepare func(context.Context) error) error {
	if prepare != nil {
		// Every record is acknowledged, so the broker's transaction has
		// begun, before the source proves it still holds its rows: a
		// source frozen after that proof finds the transaction timed
		// out when it wakes (docs/exactly-once.md#the-poller).
		if err := tx.r.txn.Flush(ctx); err != nil {
			return fmt.Errorf("flush the Kafka transaction: %w", err)
		}
		// A refused record has failed its batch, whose source gave up on
		// it: the refusal, not the Prepare that would fail now, is why
		// this run ends (an event's refusal sends it to the dead letter
		// topic).
		if err := tx.t.err(); err != nil {
			return err
		}
		if err := prepare(ctx); err != nil {
			return fmt.Errorf("before the Kafka transaction commits: %w", err)
		}
	}
	var m *Message
	if tx.mark != nil {
		var err error
		if m, err = tx.mark(); err != nil {
			return fmt.Errorf("checkpoint for the Kafka transaction: %w", err)
		}
	}
	if err := tx.r.txn.Commit(ctx, m); err != nil {
		return err
	}
	tx.open, tx.mark = false, nil
	tx.release(tx.t, nil)
	return nil
}

// finish commits what ends at a checkpoint when a run stops. A transaction
// that does not (the last batch was a chunk of a larger source
// transaction) is left for the abort: its events come again from the
// checkpoint, and read_committed consumers never see them twice.
func (tx *txnState) finish(ctx context.Context) error {
	if !tx.open {
		return nil
	}
	if tx.mark == nil {
		return fmt.Errorf("stopped in the middle of a source transaction; the open Kafka transaction is aborted and its events are published again from the checkpoint")
	}
	return tx.commit(ctx, nil)
}
