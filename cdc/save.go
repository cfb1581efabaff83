package cdc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// An acknowledgement reaches the slot across as few goroutines as the
// store allows: the sink's Kafka client records it in the position (a
// batch's Done); the stream, at its next checkpoint tick, starts a save of
// what the position holds; the checkpoint store's own Kafka client records
// the save in the position when Kafka has it; and the stream, at a later
// tick, confirms it to the slot. No goroutine of the source's own waits
// for Kafka in between: the stream starts a save and goes on reading, so
// a slow checkpoint topic neither stalls the replication stream nor keeps
// it from answering the server. The store keeps a client of its own, not
// the sink's, so that a checkpoint never waits behind the events' produce
// buffer (sink.CheckpointStore).

// saver saves the checkpoints of a source whose store saves them (not in
// Kafka transactions), one at a time: the position decides when one is due
// and records it in flight (positions.beginSave) and how it ended
// (positions.saveEnded). Only the stream's goroutine calls begin and halt;
// the store's client ends each save. A save that fails goes to failed,
// and the stream stops on it (checkpointError).
type saver struct {
	src *Source
	// ctx is the saves'; halt cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// inFlight counts the save under way: at most one.
	inFlight sync.WaitGroup
	// failed gets the first failure; buffered, so a callback never waits.
	failed chan error
}

// newSaver returns the saver of the stream that runs until ctx ends, or
// nil when the sink commits the checkpoints (txn.go), and a nil saver's
// failed channel is nil too.
func (s *Source) newSaver(ctx context.Context) *saver {
	if s.ckpt.recorder != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	return &saver{src: s, ctx: ctx, cancel: cancel, failed: make(chan error, 1)}
}

// failures is where the stream learns that a save failed; nil, which never
// delivers, for a nil saver.
func (v *saver) failures() <-chan error {
	if v == nil {
		return nil
	}
	return v.failed
}

// begin starts the save that is due at now, if one is.
func (v *saver) begin(now time.Time) {
	if v == nil {
		return
	}
	s := v.src
	var cp connector.Checkpoint
	var ok bool
	s.pos.update(func(p *positions) { cp, ok = p.beginSave(s.ids(), now, s.cfg.StatusInterval) })
	if !ok {
		return
	}
	// A save that Kafka does not answer must not hold the position back
	// for ever unnoticed.
	ctx, cancel := context.WithTimeout(v.ctx, max(10*time.Second, 10*s.cfg.CheckpointInterval))
	v.inFlight.Add(1)
	saveAsync(ctx, s.ckpt.store, cp, func(err error) {
		defer v.inFlight.Done()
		cancel()
		s.pos.update(func(p *positions) { p.saveEnded(err == nil, time.Now()) })
		if err != nil && v.ctx.Err() == nil {
			select {
			case v.failed <- fmt.Errorf("save the checkpoint at %s: %w", pglogrepl.LSN(cp.EndLSN), err):
			default:
			}
		}
	})
}

// halt cancels the save in flight, if any, and waits for it to end, so
// that Run's last save comes after it.
func (v *saver) halt() {
	if v == nil {
		return
	}
	v.cancel()
	v.inFlight.Wait()
}

// asyncSaver is a checkpoint store that saves without holding up its
// caller, as sink.CheckpointStore does: done is called once, on any
// goroutine, with what Save would have returned.
type asyncSaver interface {
	SaveAsync(ctx context.Context, cp connector.Checkpoint, done func(error))
}

// saveAsync saves cp in store and calls done with the outcome, without
// waiting for it; a store that can only block saves on a goroutine of its
// own.
func saveAsync(ctx context.Context, store connector.CheckpointStore, cp connector.Checkpoint, done func(error)) {
	if a, ok := store.(asyncSaver); ok {
		a.SaveAsync(ctx, cp, done)
		return
	}
	go func() { done(store.Save(ctx, cp)) }()
}

// save stores a checkpoint of the acknowledged position, when it moved
// since the last one, and then lets the slot be confirmed up to it,
// waiting for the store. Run calls it while no stream runs, so no saver's
// save is in flight.
func (s *Source) save(ctx context.Context) error {
	if s.ckpt.recorder != nil {
		return nil // the sink commits the checkpoints (txn.go)
	}
	cp, ok := s.pos.get().toSave(s.ids(), time.Now())
	if !ok {
		return nil
	}
	if err := s.ckpt.store.Save(ctx, cp); err != nil {
		return fmt.Errorf("save the checkpoint at %s: %w", pglogrepl.LSN(cp.EndLSN), err)
	}
	s.pos.update(func(p *positions) { p.stored(cp, time.Now()) })
	return nil
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

// SaveAsync saves at once: memory does not keep anyone waiting.
func (m *memoryCheckpoints) SaveAsync(ctx context.Context, cp connector.Checkpoint, done func(error)) {
	done(m.Save(ctx, cp))
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
