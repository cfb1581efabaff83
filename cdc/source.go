package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/cdc/internal/pgoutput"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Source is the logical replication [connector.Source].
type Source struct {
	cfg Config
	// tables are the outbox tables, as configured, then those the
	// patterns matched (patterns.go); only Run's goroutine touches it.
	tables   []table
	patterns pgsql.TablePatterns
	log      *slog.Logger

	// pos is where the source stands, from the stream to the slot
	// (position.go). It outlives a connection, so a reconnect starts
	// from it.
	pos position

	skipped     atomic.Int64 // UPDATE, DELETE and TRUNCATE changes skipped
	cleaned     atomic.Int64 // rows cdc.cleanup deleted (cleanup.go)
	cleanupErrs atomic.Int64 // cdc.cleanup rounds that failed

	// The checkpoint (checkpoint.go).
	openStore    OpenCheckpoints
	relayVersion string
	store        connector.CheckpointStore // opened on the first connection
	identity     Identity
	// checkpoint gives every batch that ends a source transaction its
	// checkpoint; chosen once, when the store is opened (checkpoint.go).
	checkpoint checkpointFunc
	// recorder: the sink commits the checkpoints in the events' Kafka
	// transactions (kafka.delivery exactly_once, txn.go); nil: the store
	// saves them. Set with checkpoint, and only there.
	recorder connector.CheckpointRecorder
	// history is what the last replay of the slot found (history.go).
	history  *historyFinding
	needMark bool // exactly once: commit a checkpoint before streaming
	loaded   bool // the store was read once

	// slotLosses counts the slot losses detected; lostSlot is set when
	// one stopped the source (slotloss.go).
	slotLosses atomic.Int64
	lostSlot   atomic.Bool
	lossMu     sync.Mutex
	lossCounts map[SlotLossCause]int64
	lostCause  SlotLossCause
	// backfill is set for a backfill (backfill.go); nil for a relay.
	backfill *backfillState
	// recovery is the backfill command a slot-loss error prints
	// (backfill.go).
	recovery recovery

	// state is a sourceState: whether Run streams, waits for the slot,
	// or neither. Run sets it; scrapes and probes read it.
	state atomic.Int32
	// holder is the PID of the session last seen holding the slot, so
	// that the wait for it is logged once; only Run touches it.
	holder int32
	// takeoverRefused is the holder the standby last failed to end
	// (cdc.takeover_after), so that it says so once.
	takeoverRefused int32
	// walSenderChecked is set once the server's wal_sender_timeout has
	// been compared with cdc.receive_timeout; sessionWalSenderTimeout
	// when the replication session may set its own (PostgreSQL 12+).
	walSenderChecked, sessionWalSenderTimeout atomic.Bool
	// onHotStandby: the server the source last prepared on is a hot
	// standby (standby.go); hotStandbyLogged: it said so, once. Only Run
	// touches them.
	onHotStandby, hotStandbyLogged bool
}

type sourceState int32

const (
	stateDown      sourceState = iota // connecting, or waiting to be restarted
	stateStreaming                    // the replication stream is open
	stateStandby                      // another session holds the slot; waiting for it
)

// Streaming reports whether the source streams from its slot, and whether,
// instead, it waits as a standby for another session to let go of the
// slot. Both false: it is connecting or waits to be restarted.
func (s *Source) Streaming() (streaming, standby bool) {
	st := sourceState(s.state.Load())
	return st == stateStreaming, st == stateStandby
}

var _ connector.Source = (*Source)(nil)

// Option wires a source to its surroundings.
type Option func(*Source)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(s *Source) { s.log = l.With("component", "cdc") }
}

// New returns a source for cfg, or every problem with cfg.
func New(cfg Config, opts ...Option) (*Source, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	for _, name := range cfg.tableNames() {
		schema, name, _ := SplitTable(name)
		t := table{schema: schema, name: name, qualified: schema + "." + name, columns: cfg.Columns}
		if m, ok := cfg.TableColumns[t.qualified]; ok {
			t.columns = m.WithDefaults()
		}
		s.tables = append(s.tables, t)
	}
	s.patterns, _ = pgsql.CompileTablePatterns("outbox.table_patterns", cfg.TablePatterns) // Validate checked them
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// ConfirmedLSN is the position the source has confirmed, or will confirm
// with its next status update: the last checkpoint's.
func (s *Source) ConfirmedLSN() pglogrepl.LSN {
	p := s.pos.get()
	return p.saved
}

// AcknowledgedLSN is the position Kafka has acknowledged everything
// before; the next checkpoint saves it.
func (s *Source) AcknowledgedLSN() pglogrepl.LSN {
	p := s.pos.get()
	return p.acked
}

// SkippedChanges counts the UPDATE, DELETE and TRUNCATE changes of the
// outbox table that the source skipped.
func (s *Source) SkippedChanges() int64 { return s.skipped.Load() }

// Run implements [connector.Source]: it prepares the publication and slot,
// waits while another session holds the slot, then streams from the slot
// until ctx is cancelled or the connection fails or falls silent.
func (s *Source) Run(ctx context.Context, out chan<- connector.Batch) error {
	defer s.state.Store(int32(stateDown))
	conn, start, snap, err := s.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer pgsql.Close(ctx, conn)
	if s.recorder != nil && s.needMark {
		// txn.go: the first checkpoint, committed before anything else.
		if err := s.emitMark(ctx, out, start); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if snap != nil {
		// snapshot.go: the rows already in the table go first, then the
		// stream from the slot's consistent point.
		if err := s.publishSnapshot(ctx, *snap, start, out); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := s.startReplication(ctx, conn, start); err != nil {
			// Kafka may have the snapshot's last rows already: a backfill
			// stops the source as soon as it does, which is often before
			// the stream has started. Without a save here the checkpoint
			// would still say the snapshot is pending, and the next start
			// would publish the whole table again.
			s.saveLast(ctx)
			if ctx.Err() != nil {
				return nil
			}
			return classify(fmt.Sprintf("start replication from slot %q", s.cfg.Slot), err)
		}
	}
	defer background(ctx, s.cfg.HeartbeatInterval > 0, s.heartbeat)()              // heartbeat.go
	defer background(ctx, s.cfg.Cleanup.Enabled && s.backfill == nil, s.cleanup)() // cleanup.go
	defer background(ctx, len(s.patterns) > 0, s.watchTables)()                    // patterns.go
	s.log.Info("replication started", "slot", s.cfg.Slot, "publication", s.cfg.Publication, "from_lsn", start)
	s.state.Store(int32(stateStreaming))

	var eventsAt int64
	s.pos.update(func(p *positions) {
		p.startStream(start)
		eventsAt = p.events
	})
	cp := s.startCheckpointer(ctx)
	st := &stream{src: s, conn: conn, out: out, rels: pgoutput.Relations{}, skipBefore: start, cpFailed: cp.failed,
		eventsAt: eventsAt, lastMark: time.Now()}
	err = st.run(ctx)
	cp.halt()
	finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var cpErr *checkpointError
	if !errors.As(err, &cpErr) {
		s.saveLast(ctx)
	}
	var dead *deadConnError
	if errors.As(err, &dead) {
		// Nothing sent on this connection reaches the server any more;
		// the next session reports the position instead.
		return err
	}
	if ctx.Err() != nil {
		if ferr := st.finish(finalCtx); ferr != nil {
			s.log.Warn("could not confirm the last position to the slot; the next start publishes the events after it again",
				"slot", s.cfg.Slot, "confirmed_lsn", s.pos.get().reported, "checkpoint_lsn", s.ConfirmedLSN(), "err", ferr)
		}
	} else if serr := st.sendStatus(finalCtx, false); serr != nil && err == nil {
		// A last status update, so the slot holds what Kafka has.
		err = serr
	}
	if ctx.Err() != nil {
		s.log.Info("replication stopped", "slot", s.cfg.Slot, "confirmed_lsn", s.ConfirmedLSN())
		return nil
	}
	return err
}

// saveLast saves what Kafka acknowledged as the source stops, so that the
// next start repeats as little as it can.
func (s *Source) saveLast(ctx context.Context) {
	finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.save(finalCtx); err != nil {
		s.log.Warn("could not save the last checkpoint; the next start publishes the events after the previous one again",
			"slot", s.cfg.Slot, "checkpoint_lsn", s.ConfirmedLSN(), "acknowledged_lsn", s.AcknowledgedLSN(), "err", err)
	}
}

// background runs work in a goroutine of its own while the stream runs,
// when on; the returned function ends it and waits for it to exit.
func background(ctx context.Context, on bool, work func(context.Context)) (stop func()) {
	if !on {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		work(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
