package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// The source's memory of what it published lives outside PostgreSQL, in a
// checkpoint store (the app keeps it in a compacted Kafka topic), so that a
// slot that is merely behind can be told from one that was lost:
//
//   - acked: what Kafka has acknowledged, raised by the batches' Done
//     callbacks as they come;
//   - saved: the part of it a checkpoint holds, raised by the saver every
//     cdc.checkpoint_interval while acked moves, or by the commit of the
//     Kafka transaction a checkpoint goes in (txn.go);
//   - the slot: confirmed only up to saved, never beyond.
//
// (position.go keeps them, and decides with them.) So the slot is never
// ahead of the checkpoint unless someone else moved it, and a slot behind
// the checkpoint is streamed from the checkpoint on, skipping what Kafka
// already has.
//
// How a checkpoint is written is chosen once, when the store is opened:
// the store saves it (the saver below), or, with kafka.delivery
// exactly_once, the sink commits it in the Kafka transaction of the events
// it covers (txn.go). Either way every batch that ends a source
// transaction goes through one checkpointFunc.

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
	return func(s *Source) { s.openStore, s.relayVersion = open, relayVersion }
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
	if s.store != nil {
		return nil
	}
	id, err := Identify(ctx, s.cfg.URL, s.cfg.Network)
	if err != nil {
		return err
	}
	s.identity = id
	key := id.CheckpointKey(s.cfg.Slot)
	var store connector.CheckpointStore = &memoryCheckpoints{}
	if s.openStore != nil {
		if store, err = s.openStore(ctx, key); err != nil {
			return fmt.Errorf("open the checkpoint store: %w", err)
		}
	}
	// The one place the source asks how checkpoints are written
	// (kafka.delivery); the rest follows from s.checkpoint.
	if rec, ok := store.(connector.CheckpointRecorder); ok && rec.Transactions() {
		// txn.go: read once the slot is this relay's and the other
		// writers are fenced, in prepare.
		s.recorder, s.checkpoint = rec, s.txnCheckpoint
		s.store = store
		return nil
	}
	s.checkpoint = s.storeCheckpoint
	if err := s.firstLoad(ctx, store); err != nil {
		store.Close()
		return err
	}
	return nil
}

// firstLoad reads the checkpoint the first time, into a source that knows
// none yet.
func (s *Source) firstLoad(ctx context.Context, store connector.CheckpointStore) error {
	key := s.identity.CheckpointKey(s.cfg.Slot)
	cp, found, err := store.Load(ctx)
	if err != nil {
		if errors.Is(err, connector.ErrCheckpointUnreadable) {
			return connector.Permanent(fmt.Errorf("read the checkpoint of slot %q: %w", s.cfg.Slot, err))
		}
		return fmt.Errorf("read the checkpoint of slot %q: %w", s.cfg.Slot, err)
	}
	s.store = store
	s.loaded = true
	if found {
		s.pos.update(func(p *positions) { p.load(cp, cp.Key == key) })
		s.log.Info("read the checkpoint", "slot", s.cfg.Slot, "end_lsn", pglogrepl.LSN(cp.EndLSN).String(),
			"commit_time", cp.CommitTime, "written", cp.Written, "system_identifier", cp.Key.SystemID)
	}
	return nil
}

// reloadCheckpoint reads the store again after another session held the
// slot: another relay on the same slot saves under the same key, and the
// position it reached is where this one takes over.
func (s *Source) reloadCheckpoint(ctx context.Context) error {
	cp, found, err := s.store.Load(ctx)
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
	s.pos.update(func(p *positions) { took = p.takeOver(cp, s.identity.CheckpointKey(s.cfg.Slot)) })
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
	if s.recorder != nil {
		return false // the sink committed every checkpoint there is (txn.go)
	}
	p := s.pos.get()
	if p.current == nil || p.current.Key != s.identity.CheckpointKey(s.cfg.Slot) {
		return false
	}
	cp, found, err := s.store.Load(ctx)
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

func (s *Source) setCurrent(cp *connector.Checkpoint) {
	s.pos.update(func(p *positions) { p.current = cp })
}

// ids is what every checkpoint of the source says of itself.
func (s *Source) ids() checkpointIdentity {
	return checkpointIdentity{key: s.identity.CheckpointKey(s.cfg.Slot), timeline: s.identity.Timeline, relayVersion: s.relayVersion}
}

// Close releases the checkpoint store. Call it once Run has returned for
// the last time.
func (s *Source) Close() {
	if s.store != nil {
		s.store.Close()
	}
}

// save stores a checkpoint of the acknowledged position, when it moved
// since the last one, and then lets the slot be confirmed up to it. Only
// one save runs at a time: the checkpointer's, or Run's own while no
// checkpointer runs.
func (s *Source) save(ctx context.Context) error {
	if s.recorder != nil {
		return nil // the sink commits the checkpoints (txn.go)
	}
	cp, ok := s.pos.get().toSave(s.ids(), time.Now())
	if !ok {
		return nil
	}
	if err := s.store.Save(ctx, cp); err != nil {
		return fmt.Errorf("save the checkpoint at %s: %w", pglogrepl.LSN(cp.EndLSN), err)
	}
	s.pos.update(func(p *positions) { p.stored(cp, time.Now()) })
	return nil
}

// checkpointer saves a checkpoint every cdc.checkpoint_interval while
// events are acknowledged. A position that moved only with the server's
// WAL (keepalives, other tables) is saved once a status interval: the slot
// must follow it so that the server can recycle WAL, but not five times a
// second on a busy server with an idle outbox. Its first failure ends it
// and goes to failed; the stream then stops on it.
type checkpointer struct {
	stop   context.CancelFunc
	done   chan struct{}
	failed chan error
}

func (s *Source) startCheckpointer(ctx context.Context) *checkpointer {
	ctx, stop := context.WithCancel(ctx)
	c := &checkpointer{stop: stop, done: make(chan struct{}), failed: make(chan error, 1)}
	go func() {
		defer close(c.done)
		t := time.NewTicker(s.cfg.CheckpointInterval)
		defer t.Stop()
		savedEvents := s.pos.get().events
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p := s.pos.get()
			if !p.saveDue(savedEvents, time.Now(), s.cfg.StatusInterval) {
				continue
			}
			n := p.events
			// A save that Kafka does not answer must not hold the
			// position back for ever unnoticed.
			sctx, cancel := context.WithTimeout(ctx, max(10*time.Second, 10*s.cfg.CheckpointInterval))
			err := s.save(sctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					c.failed <- err
				}
				return
			}
			savedEvents = n
		}
	}()
	return c
}

// halt stops the checkpointer and waits for it.
func (c *checkpointer) halt() {
	c.stop()
	<-c.done
}

// memoryCheckpoints is the store of a source given none: it keeps the
// last checkpoint for the life of the process.
type memoryCheckpoints struct {
	mu    sync.Mutex
	cp    connector.Checkpoint
	found bool
}

func (m *memoryCheckpoints) Load(context.Context) (connector.Checkpoint, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cp, m.found, nil
}

func (m *memoryCheckpoints) Save(_ context.Context, cp connector.Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cp, m.found = cp, true
	return nil
}

func (m *memoryCheckpoints) Close() {}

// checkpointError is a checkpoint that could not be saved. The stream
// stops on it: the slot cannot be confirmed past the last checkpoint, and
// WAL would pile up behind a relay that looks healthy.
type checkpointError struct{ err error }

func (e *checkpointError) Error() string {
	return fmt.Sprintf("%v; the slot is confirmed only up to a saved checkpoint, so the relay stops until it can save one", e.err)
}

func (e *checkpointError) Unwrap() error { return e.err }
