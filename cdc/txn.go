package cdc

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// With kafka.delivery exactly_once the sink commits each checkpoint in the
// Kafka transaction of the events it covers (connector.Transactional): the
// source gives every batch that ends a source transaction a Checkpoint,
// and the runner commits at one of them. A batch is done only once a
// checkpoint at or after it is committed, so saved, the position the slot
// is confirmed to, rises in the batches' Done, never ahead of Kafka.
//
// The checkpoint is read once the relay may write: after it waited for
// the slot, and after it fenced any earlier instance (prepare), so that no
// stale instance can commit a later one behind its back.

// txnCheckpoint is the checkpointFunc of a source whose checkpoints the
// sink commits in Kafka transactions: the batch carries its checkpoint,
// and its Done, called once a checkpoint at or after it is committed,
// raises saved with what Kafka acknowledged.
func (s *Source) txnCheckpoint(txn *ackedTxn, events, n int64, pending bool) (func() (*connector.Message, error), func(error)) {
	var built *connector.Checkpoint
	mark := func() (*connector.Message, error) {
		cp := s.pos.get().mark(s.ids(), txn, events, pending, time.Now())
		built = &cp
		return s.ckpt.recorder.Message(cp)
	}
	done := func(err error) {
		if err != nil {
			return
		}
		s.pos.update(func(p *positions) {
			p.ack(txn, n, txn.lastID != "")
			p.committed(txn.end, built)
		})
	}
	return mark, done
}

// emitMark hands on an empty batch that only commits a checkpoint at lsn:
// the first one of a relay, so that a slot lost before the first event is
// caught too, and, with cdc.snapshot initial, the one saying a snapshot is
// under way.
func (s *Source) emitMark(ctx context.Context, out chan<- connector.Batch, lsn pglogrepl.LSN) error {
	p := s.pos.get()
	mark, done := s.ckpt.write(p.markAt(lsn), p.events, 0, p.snapshotPending)
	select {
	case out <- connector.Batch{Checkpoint: mark, Done: done}:
		s.ckpt.needMark = false
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// markIdle carries a position the server's keepalives reached, while
// nothing of the outbox is in flight, into a checkpoint once a status
// interval: the slot may only be confirmed up to a committed checkpoint.
func (st *stream) markIdle(ctx context.Context) error {
	s := st.src
	if s.ckpt.recorder == nil {
		return nil
	}
	var txn *ackedTxn
	var handed int64
	s.pos.update(func(p *positions) {
		if now := time.Now(); p.idleMarkDue(now, s.cfg.StatusInterval) {
			txn, handed = p.idleMark(now)
		}
	})
	if txn == nil {
		return nil
	}
	mark, done := s.ckpt.write(txn, handed, 0, false)
	return st.emitWith(ctx, len(st.batch.events), st.batch.bytes, mark, done)
}
