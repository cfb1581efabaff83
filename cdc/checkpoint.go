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
//   - saved: the part of it a checkpoint holds, raised by the checkpointer
//     every cdc.checkpoint_interval while acked moves;
//   - the slot: confirmed only up to saved, never beyond.
//
// So the slot is never ahead of the checkpoint unless someone else moved
// it, and a slot behind the checkpoint is streamed from the checkpoint on,
// skipping what Kafka already has.

// OpenCheckpoints opens the store the source keeps its checkpoints in, for
// the relay named by key. It is called once, on the first connection.
type OpenCheckpoints func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error)

// WithCheckpoints keeps the source's checkpoints in the store open
// returns; relayVersion is written into each. Without it, checkpoints live
// in memory: a reconnect still catches a lost slot, a restart cannot.
func WithCheckpoints(open OpenCheckpoints, relayVersion string) Option {
	return func(s *Source) { s.openStore, s.relayVersion = open, relayVersion }
}

// ackedTxn is the last transaction with events that Kafka acknowledged.
type ackedTxn struct {
	end    pglogrepl.LSN
	commit time.Time
	lastID string
	// proof names the transaction in the server's history (history.go);
	// nil for a mark at a position.
	proof *connector.CheckpointTxn
}

// Checkpoint is the last checkpoint the source saved or loaded, if any.
// It is meant for tests and for a stopped source.
func (s *Source) Checkpoint() (connector.Checkpoint, bool) {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	if s.current == nil {
		return connector.Checkpoint{}, false
	}
	return *s.current, true
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
	if rec, ok := store.(connector.CheckpointRecorder); ok && rec.Transactions() {
		// txn.go: read once the slot is this relay's and the other
		// writers are fenced, in prepare.
		s.recorder = rec
		s.store = store
		return nil
	}
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
		s.setCurrent(&cp)
		if cp.Key == key {
			s.eventsBase = cp.Events
			s.advance(pglogrepl.LSN(cp.EndLSN))
			s.saved.Store(cp.EndLSN)
			s.loadTxn(cp)
		}
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
	cur, ok := s.Checkpoint()
	if !found || cp.Key != s.identity.CheckpointKey(s.cfg.Slot) || (ok && cur.Key == cp.Key && cp.EndLSN <= cur.EndLSN) {
		return nil
	}
	s.setCurrent(&cp)
	s.eventsBase = cp.Events - s.events.Load()
	s.loadTxn(cp)
	s.advance(pglogrepl.LSN(cp.EndLSN))
	if cp.EndLSN > s.saved.Load() {
		s.saved.Store(cp.EndLSN)
	}
	s.log.Info("read the checkpoint another session left", "slot", s.cfg.Slot, "end_lsn", pglogrepl.LSN(cp.EndLSN).String(),
		"commit_time", cp.CommitTime, "written", cp.Written)
	return nil
}

func (s *Source) setCurrent(cp *connector.Checkpoint) {
	s.cpMu.Lock()
	s.current = cp
	s.cpMu.Unlock()
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
	lsn := s.acked.Load()
	// Read after acked, and raised before it: it may be a transaction
	// past lsn, whose end Kafka has then acknowledged too.
	last := s.lastTxn.Load()
	if last != nil && last.EndLSN > lsn {
		lsn = last.EndLSN
	}
	key := s.identity.CheckpointKey(s.cfg.Slot)
	cur, ok := s.Checkpoint()
	own := ok && cur.Key == key
	pending := s.snapshotting.Load()
	if own && cur.SnapshotPending && pending {
		return nil // held at the consistent point until the snapshot is in Kafka
	}
	if own && cur.EndLSN == lsn && cur.SnapshotPending == pending {
		return nil
	}
	cp := connector.Checkpoint{
		Key:          key,
		EndLSN:       lsn,
		Timeline:     s.identity.Timeline,
		Events:       s.eventsBase + s.events.Load(),
		RelayVersion: s.relayVersion,
		Written:      time.Now(),

		SnapshotPending: pending,
	}
	if own {
		cp.CommitTime, cp.LastEventID = cur.CommitTime, cur.LastEventID
	}
	if t := s.lastAcked.Load(); t != nil {
		cp.CommitTime, cp.LastEventID = t.commit, t.lastID
	}
	if last != nil {
		cp.LastTxn = *last
	}
	if err := s.store.Save(ctx, cp); err != nil {
		return fmt.Errorf("save the checkpoint at %s: %w", pglogrepl.LSN(lsn), err)
	}
	s.setCurrent(&cp)
	s.saved.Store(lsn)
	s.lastSave = time.Now()
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
		savedEvents := s.events.Load()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, _ := s.Checkpoint()
			snapshotDone := cur.SnapshotPending && !s.snapshotting.Load()
			if s.acked.Load() == s.saved.Load() && !snapshotDone {
				continue
			}
			n := s.events.Load()
			if n == savedEvents && !snapshotDone && time.Since(s.lastSave) < s.cfg.StatusInterval {
				continue
			}
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
