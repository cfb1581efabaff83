package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/cdc/internal/pgoutput"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Source is the logical replication [connector.Source]. Its parts, each
// with the goroutines that touch it: the position record (position.go),
// the checkpoints (checkpoint.go), the wait for the slot (slotwait.go),
// what it learned of the server (setup.go) and the counters the metrics
// read (counters.go). A replication session is a stream (stream.go), run
// on Run's goroutine.
type Source struct {
	cfg Config
	log *slog.Logger
	// tables are the outbox tables, as configured, then those the
	// patterns matched (patterns.go); only Run's goroutine, and the
	// stream on it, touches it.
	tables   []table
	patterns pgsql.TablePatterns

	// pos is where the source stands, from the stream to the slot. It
	// outlives a connection, so a reconnect starts from it.
	pos    position
	ckpt   checkpoints
	wait   slotWait
	server serverNotes
	count  counters

	// backfill is set for a backfill (backfill.go); nil for a relay.
	backfill *backfillState
	// recovery is the backfill command a slot-loss error prints
	// (backfill.go).
	recovery recovery
	// foreign is what settleForeign found of the other cluster's
	// checkpoint the source keeps, when it makes the slot lost
	// (foreign.go); nil otherwise.
	foreign *ForeignFinding
	// handed counts the batches on their way to Kafka, and drainTimeout
	// bounds the wait for them when the slot is lost under the stream
	// (lostslot.go).
	handed       handedOn
	drainTimeout time.Duration
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

// Run implements [connector.Source]: it prepares the publication and slot,
// waits while another session holds the slot, then streams from the slot
// until ctx is cancelled or the connection fails or falls silent.
func (s *Source) Run(ctx context.Context, out chan<- connector.Batch) error {
	defer s.wait.set(stateDown)
	conn, start, err := s.begin(ctx, out)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer pgsql.Close(ctx, conn)
	defer background(ctx, s.cfg.HeartbeatInterval > 0, s.heartbeat)()                        // heartbeat.go
	defer background(ctx, s.cfg.Cleanup.Enabled && s.backfill == nil, s.cleanup)()           // cleanup.go
	defer background(ctx, len(s.patterns) > 0, s.watchTables)()                              // patterns.go
	defer background(ctx, s.backfill == nil && !s.server.onHotStandby, s.takeTxnSnapshots)() // txnsnapshot.go
	s.log.Info("replication started", "slot", s.cfg.Slot, "publication", s.cfg.Publication, "from_lsn", start)
	s.wait.set(stateStreaming)
	return s.streamFrom(ctx, conn, out, start)
}

// begin connects (connect.go), commits the first checkpoint when that is
// due in Kafka transactions (txn.go), and publishes the snapshot when
// there is one (snapshot.go): the rows already in the table go first,
// then the stream from the slot's consistent point. It returns the
// replication connection, streaming from start.
func (s *Source) begin(ctx context.Context, out chan<- connector.Batch) (*pgconn.PgConn, pglogrepl.LSN, error) {
	conn, start, snap, err := s.connect(ctx)
	if err != nil {
		return nil, 0, err
	}
	if s.ckpt.recorder != nil && s.ckpt.needMark {
		if err := s.emitMark(ctx, out, start); err != nil {
			pgsql.Close(ctx, conn)
			return nil, 0, err
		}
	}
	if snap == nil {
		return conn, start, nil
	}
	if err := s.publishSnapshot(ctx, *snap, start, out); err != nil {
		pgsql.Close(ctx, conn)
		return nil, 0, err
	}
	if err := s.startReplication(ctx, conn, start); err != nil {
		// Kafka may have the snapshot's last rows already: a backfill
		// stops the source as soon as it does, which is often before the
		// stream has started. Without a save here the checkpoint would
		// still say the snapshot is pending, and the next start would
		// publish the whole table again.
		s.saveLast(ctx)
		pgsql.Close(ctx, conn)
		return nil, 0, classify(fmt.Sprintf("start replication from slot %q", s.cfg.Slot), err)
	}
	return conn, start, nil
}

// streamFrom streams from start until ctx ends or the session fails
// (stream.go), then leaves the slot holding what Kafka has, as far as the
// session still can.
func (s *Source) streamFrom(ctx context.Context, conn *pgconn.PgConn, out chan<- connector.Batch, start pglogrepl.LSN) error {
	s.pos.update(func(p *positions) { p.startStream(start, time.Now()) })
	st := &stream{src: s, conn: conn, out: out, rels: pgoutput.Relations{}, saver: s.newSaver(ctx)}
	err := st.run(ctx)
	s.drainIfLost(ctx, err) // lostslot.go
	st.saver.halt()
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
	finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
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
