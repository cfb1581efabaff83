package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// The source's memory of what it published lives outside PostgreSQL, in a
// checkpoint store (the app keeps it in a compacted Kafka topic), so that a
// slot that is merely behind can be told from one that was lost:
//
//   - acked: what Kafka has acknowledged, raised by the batches' Done
//     callbacks as they come;
//   - saved: the part of it a checkpoint holds, raised by the store's
//     saves, which the stream starts every cdc.checkpoint_interval while
//     acked moves (save.go), or by the commit of the Kafka transaction a
//     checkpoint goes in (txn.go);
//   - the slot: confirmed only up to saved, never beyond.
//
// (position.go keeps them, and decides with them.) So the slot is never
// ahead of the checkpoint unless someone else moved it, and a slot behind
// the checkpoint is streamed from the checkpoint on, skipping what Kafka
// already has.
//
// How a checkpoint is written is chosen once, when the store is opened:
// the store saves it (save.go), or, with kafka.delivery
// exactly_once, the sink commits it in the Kafka transaction of the events
// it covers (txn.go). Either way every batch that ends a source
// transaction goes through one checkpointFunc.

// checkpoints is how a source keeps its checkpoints: the store, opened on
// the first connection, the server's identity that names them, and how a
// checkpoint is written, chosen once, when the store is opened. It holds
// no position: the checkpoints it writes and reads go into the position
// record. Run's goroutine sets it; the batches' calls, on the runner's
// goroutines, read what does not change once the store is open.
type checkpoints struct {
	open         OpenCheckpoints
	relayVersion string
	store        connector.CheckpointStore // opened on the first connection
	identity     Identity
	// write gives every batch that ends a source transaction its
	// checkpoint.
	write checkpointFunc
	// recorder: the sink commits the checkpoints in the events' Kafka
	// transactions (kafka.delivery exactly_once, txn.go); nil: the store
	// saves them. Set with write, and only there.
	recorder connector.CheckpointRecorder
	needMark bool // exactly once: commit a checkpoint before streaming
	loaded   bool // the store was read once
}

// checkpointFunc gives a batch that ends after txn (a source transaction,
// or a mark at a position) its checkpoint: mark, when not nil, is the
// record the sink commits with the batch, and done, the batch's Done,
// records in the position what Kafka acknowledged. events counts the
// events of this process handed on up to and with the batch, n of them in
// it; pending says a snapshot is still under way. It is called once per
// such batch, by the goroutine that hands the batches on, in their order.
type checkpointFunc func(txn *ackedTxn, events, n int64, pending bool) (mark func() (*connector.Message, error), done func(error))

// storeCheckpoint is the checkpointFunc of a source whose store saves the
// checkpoints: a batch records what Kafka acknowledged, and the saver
// saves it.
func (s *Source) storeCheckpoint(txn *ackedTxn, _, n int64, _ bool) (func() (*connector.Message, error), func(error)) {
	return nil, func(err error) {
		if err == nil {
			s.pos.update(func(p *positions) { p.ack(txn, n, true) })
		}
	}
}

// OpenCheckpoints opens the store the source keeps its checkpoints in, for
// the relay named by key. It is called once, on the first connection.
type OpenCheckpoints func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error)

// WithCheckpoints keeps the source's checkpoints in the store open
// returns; relayVersion is written into each. Without it, checkpoints live
// in memory: a reconnect still catches a lost slot, a restart cannot.
func WithCheckpoints(open OpenCheckpoints, relayVersion string) Option {
	return func(s *Source) { s.ckpt.open, s.ckpt.relayVersion = open, relayVersion }
}

// Checkpoint is the last checkpoint the source saved or loaded, if any.
// It is meant for tests and for a stopped source.
func (s *Source) Checkpoint() (connector.Checkpoint, bool) {
	p := s.pos.get()
	if p.current == nil {
		return connector.Checkpoint{}, false
	}
	return *p.current, true
}

// loadCheckpoint identifies the server, opens the store and reads the
// checkpoint, once per source.
func (s *Source) loadCheckpoint(ctx context.Context) error {
	c := &s.ckpt
	if c.store != nil {
		return nil
	}
	id, err := Identify(ctx, s.cfg.URL, s.cfg.Network)
	if err != nil {
		return err
	}
	c.identity = id
	key := id.CheckpointKey(s.cfg.Slot)
	var store connector.CheckpointStore = &memoryCheckpoints{}
	if c.open != nil {
		if store, err = c.open(ctx, key); err != nil {
			return fmt.Errorf("open the checkpoint store: %w", err)
		}
	}
	// The one place the source asks how checkpoints are written
	// (kafka.delivery); the rest follows from c.write.
	if rec, ok := store.(connector.CheckpointRecorder); ok && rec.Transactions() {
		// txn.go: read once the slot is this relay's and the other
		// writers are fenced, in prepare.
		c.recorder, c.write = rec, s.txnCheckpoint
		c.store = store
		return nil
	}
	c.write = s.storeCheckpoint
	if err := s.firstLoad(ctx, store); err != nil {
		store.Close()
		return err
	}
	return nil
}

// firstLoad reads the checkpoint the first time, into a source that knows
// none yet.
func (s *Source) firstLoad(ctx context.Context, store connector.CheckpointStore) error {
	key := s.key()
	cp, found, err := store.Load(ctx)
	if err != nil {
		if errors.Is(err, connector.ErrCheckpointUnreadable) {
			return connector.Permanent(fmt.Errorf("read the checkpoint of slot %q: %w", s.cfg.Slot, err))
		}
		return fmt.Errorf("read the checkpoint of slot %q: %w", s.cfg.Slot, err)
	}
	s.ckpt.store, s.ckpt.loaded = store, true
	if found {
		s.pos.update(func(p *positions) { p.load(cp, cp.Key == key) })
	}
	if found && cp.Key == key {
		// Another cluster's is judged before the slot (foreign.go).
		s.log.Info("read the checkpoint", "slot", s.cfg.Slot, "end_lsn", pglogrepl.LSN(cp.EndLSN).String(),
			"commit_time", cp.CommitTime, "written", cp.Written, "system_identifier", cp.Key.SystemID)
	}
	return nil
}

// reloadCheckpoint reads the store again after another session held the
// slot: another relay on the same slot saves under the same key, and the
// position it reached is where this one takes over.
func (s *Source) reloadCheckpoint(ctx context.Context) error {
	cp, found, err := s.ckpt.store.Load(ctx)
	if err != nil {
		if errors.Is(err, connector.ErrCheckpointUnreadable) {
			return connector.Permanent(fmt.Errorf("read the checkpoint of slot %q: %w", s.cfg.Slot, err))
		}
		return fmt.Errorf("read the checkpoint of slot %q: %w", s.cfg.Slot, err)
	}
	if !found {
		return nil
	}
	var took bool
	s.pos.update(func(p *positions) { took = p.takeOver(cp, s.key()) })
	if !took {
		return nil
	}
	s.log.Info("read the checkpoint another session left", "slot", s.cfg.Slot, "end_lsn", pglogrepl.LSN(cp.EndLSN).String(),
		"commit_time", cp.CommitTime, "written", cp.Written)
	return nil
}

// saveLate saves the acknowledgements that came after the last session
// saved its checkpoint as it ended: the records it had on their way then,
// which Kafka has, and which a backfill from the older checkpoint would
// publish again uncounted. It reports whether it saved. It saves only
// while the store still holds this source's own last checkpoint, so that
// a session that wrote one since (one that recreated the slot) keeps it.
func (s *Source) saveLate(ctx context.Context) bool {
	if s.ckpt.recorder != nil {
		return false // the sink committed every checkpoint there is (txn.go)
	}
	p := s.pos.get()
	if p.current == nil || p.current.Key != s.key() {
		return false
	}
	cp, found, err := s.ckpt.store.Load(ctx)
	if err != nil || !found || cp.Key != p.current.Key || cp.EndLSN != p.current.EndLSN || cp.Events != p.current.Events {
		return false
	}
	saved := p.current.EndLSN
	if err := s.save(ctx); err != nil {
		s.log.Warn("could not save the events Kafka acknowledged after the last checkpoint; a backfill from it publishes them again",
			"slot", s.cfg.Slot, "checkpoint_lsn", pglogrepl.LSN(saved).String(), "acknowledged_lsn", s.AcknowledgedLSN(), "err", err)
		return false
	}
	return s.pos.get().current.EndLSN != saved
}

// setCurrent makes cp the checkpoint the source knows, with the
// transaction snapshot it carries: a slot started over after a loss
// carries none, a backfill the one it chose its rows by.
func (s *Source) setCurrent(cp *connector.Checkpoint) {
	s.pos.update(func(p *positions) {
		p.current, p.txnSnap, p.snapWaiting = cp, connector.TxnSnapshot{}, nil
		if cp != nil {
			p.txnSnap = cp.TxnSnapshot
		}
	})
}

// key is the key the source's checkpoints are saved under.
func (s *Source) key() connector.CheckpointKey { return s.ckpt.identity.CheckpointKey(s.cfg.Slot) }

// ids is what every checkpoint of the source says of itself.
func (s *Source) ids() checkpointIdentity {
	return checkpointIdentity{key: s.key(), timeline: s.ckpt.identity.Timeline, relayVersion: s.ckpt.relayVersion}
}

// Close releases the checkpoint store. Call it once Run has returned for
// the last time.
func (s *Source) Close() {
	if s.ckpt.store != nil {
		s.ckpt.store.Close()
	}
}
