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

// markFuncs returns the Checkpoint and Done of a batch that ends after
// txn, when events events of this process have been handed on, n of them
// in this batch.
func (s *Source) markFuncs(txn *ackedTxn, events, n int64, snapshotPending bool) (func() (*connector.Message, error), func(error)) {
	var built *connector.Checkpoint
	mark := func() (*connector.Message, error) {
		cp := connector.Checkpoint{
			Key:          s.identity.CheckpointKey(s.cfg.Slot),
			EndLSN:       uint64(txn.end),
			CommitTime:   txn.commit,
			LastEventID:  txn.lastID,
			Timeline:     s.identity.Timeline,
			Events:       s.eventsBase + events,
			RelayVersion: s.relayVersion,
			Written:      time.Now(),

			SnapshotPending: snapshotPending,
		}
		if txn.proof != nil && txn.proof.EndLSN <= uint64(txn.end) {
			cp.LastTxn = *txn.proof
		}
		built = &cp
		return s.recorder.Message(cp)
	}
	done := func(err error) {
		if err != nil {
			return
		}
		if txn.lastID != "" {
			s.lastAcked.Store(txn)
		}
		s.events.Add(n)
		if txn.proof != nil {
			s.noteTxn(txn.proof)
		}
		s.advance(txn.end)
		for {
			cur := s.saved.Load()
			if uint64(txn.end) <= cur || s.saved.CompareAndSwap(cur, uint64(txn.end)) {
				break
			}
		}
		if built != nil {
			s.setCurrent(built)
		}
	}
	return mark, done
}

// markAt is a transaction-less mark at lsn: the last acknowledged
// transaction's commit time and event id, the position lsn.
func (s *Source) markAt(lsn pglogrepl.LSN) *ackedTxn {
	t := &ackedTxn{end: lsn, proof: s.lastTxn.Load()}
	if last := s.lastAcked.Load(); last != nil {
		t.commit, t.lastID = last.commit, last.lastID
	} else if cp, ok := s.Checkpoint(); ok {
		t.commit, t.lastID = cp.CommitTime, cp.LastEventID
	}
	return t
}

// emitMark hands on an empty batch that only commits a checkpoint at lsn:
// the first one of a relay, so that a slot lost before the first event is
// caught too, and, with cdc.snapshot initial, the one saying a snapshot is
// under way.
func (s *Source) emitMark(ctx context.Context, out chan<- connector.Batch, lsn pglogrepl.LSN) error {
	mark, done := s.markFuncs(s.markAt(lsn), s.events.Load(), 0, s.snapshotting.Load())
	select {
	case out <- connector.Batch{Checkpoint: mark, Done: done}:
		s.needMark = false
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
	if s.recorder == nil || uint64(st.emitted) <= s.saved.Load() || time.Since(st.lastMark) < s.cfg.StatusInterval || s.snapshotting.Load() {
		return nil
	}
	mark, done := s.markFuncs(s.markAt(st.emitted), st.eventsAt, 0, false)
	st.lastMark = time.Now()
	return st.emitWith(ctx, mark, done)
}
