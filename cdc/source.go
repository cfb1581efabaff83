package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxrelay/outboxrelay/cdc/internal/pgoutput"
	"github.com/outboxrelay/outboxrelay/connector"
)

// Source is the logical replication [connector.Source].
type Source struct {
	cfg Config
	// tables are the outbox tables, as configured.
	tables []table
	log    *slog.Logger

	// acked is the end LSN of the last transaction that Kafka has
	// acknowledged along with everything before it, or a keepalive
	// position reached while nothing was in flight. Batch Done callbacks
	// raise it from the sink's goroutines; the replication loop reads it.
	// It outlives a connection, so a reconnect starts from it.
	acked atomic.Uint64

	skipped atomic.Int64 // UPDATE, DELETE and TRUNCATE changes skipped

	// The checkpoint (checkpoint.go). saved is the position the last
	// checkpoint holds: the slot is confirmed up to it and no further.
	openStore    OpenCheckpoints
	relayVersion string
	store        connector.CheckpointStore // opened on the first connection
	identity     Identity
	saved        atomic.Uint64
	lastAcked    atomic.Pointer[ackedTxn]
	// lastTxn is the last transaction received from the slot whose end
	// Kafka has, with everything before it (history.go): raised before
	// acked in the same callback, so that it is never behind a checkpoint
	// that acked gives.
	lastTxn atomic.Pointer[connector.CheckpointTxn]
	// history is what the last replay of the slot found (history.go).
	history    *historyFinding
	events     atomic.Int64 // events acknowledged by this process
	eventsBase int64        // events the checkpoint counted before
	lastSave   time.Time
	needMark   bool // exactly once: commit a checkpoint before streaming
	// snapshotting: the rows of cdc.snapshot initial are not all in
	// Kafka yet, and the checkpoint holds at the slot's consistent point.
	snapshotting atomic.Bool
	cpMu         sync.Mutex
	current      *connector.Checkpoint // saved or loaded; nil: none
	loaded       bool                  // the store was read once
	// recorder: the sink commits the checkpoints in the events' Kafka
	// transactions (kafka.delivery exactly_once, txn.go); nil otherwise.
	recorder connector.CheckpointRecorder

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
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// ConfirmedLSN is the position the source has confirmed, or will confirm
// with its next status update: the last checkpoint's.
func (s *Source) ConfirmedLSN() pglogrepl.LSN { return pglogrepl.LSN(s.saved.Load()) }

// AcknowledgedLSN is the position Kafka has acknowledged everything
// before; the next checkpoint saves it.
func (s *Source) AcknowledgedLSN() pglogrepl.LSN { return pglogrepl.LSN(s.acked.Load()) }

// SkippedChanges counts the UPDATE, DELETE and TRUNCATE changes of the
// outbox table that the source skipped.
func (s *Source) SkippedChanges() int64 { return s.skipped.Load() }

// advance raises acked to lsn; it never lowers it.
func (s *Source) advance(lsn pglogrepl.LSN) {
	for {
		cur := s.acked.Load()
		if uint64(lsn) <= cur || s.acked.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

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
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
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
	defer s.startHeartbeat(ctx)() // heartbeat.go; off unless cdc.heartbeat_interval > 0
	s.log.Info("replication started", "slot", s.cfg.Slot, "publication", s.cfg.Publication, "from_lsn", start)
	s.state.Store(int32(stateStreaming))

	cp := s.startCheckpointer(ctx)
	st := &stream{src: s, conn: conn, out: out, rels: pgoutput.Relations{}, emitted: start, skipBefore: start, cpFailed: cp.failed,
		eventsAt: s.events.Load(), lastMark: time.Now()}
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
				"slot", s.cfg.Slot, "confirmed_lsn", pglogrepl.LSN(st.reported), "checkpoint_lsn", s.ConfirmedLSN(), "err", ferr)
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

// connect prepares the slot, waits while another session holds it, opens
// the replication connection and starts streaming. It returns the
// connection and the position streaming starts from; with a snapshot to
// publish first (cdc.snapshot initial), it returns before starting, and
// Run starts once the snapshot is handed on.
func (s *Source) connect(ctx context.Context) (*pgconn.PgConn, pglogrepl.LSN, *snapshotJob, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.URL)
	if err != nil {
		return nil, 0, nil, connector.Permanent(fmt.Errorf("postgres.url: %w", redactErr(err)))
	}
	s.cfg.Network.Apply(cfg)
	cfg.RuntimeParams["replication"] = "database"
	if err := s.loadCheckpoint(ctx); err != nil { // checkpoint.go
		return nil, 0, nil, err
	}
	closeConn := func(conn *pgconn.PgConn) {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		conn.Close(closeCtx)
		cancel()
	}
	for {
		pos, err := s.prepare(ctx) // setup.go; waits while the slot is held
		if err != nil {
			return nil, 0, nil, err
		}
		if _, set := cfg.RuntimeParams["wal_sender_timeout"]; !set && s.sessionWalSenderTimeout.Load() {
			// The server then ends this session's walsender, and lets go
			// of the slot, when it hears nothing from the relay for as long
			// as the relay waits to hear from it: after a silent loss, the
			// relay's next session need not wait long for the slot. Status
			// updates go every cdc.status_interval, well within it.
			cfg.RuntimeParams["wal_sender_timeout"] = strconv.FormatInt(s.cfg.ReceiveTimeout.Milliseconds(), 10)
		}
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, 0, nil, classify("open the replication connection", err)
		}
		var snap *snapshotJob
		if pos.create {
			lsn, name, err := s.createExported(ctx, conn)
			if isDuplicate(err) {
				closeConn(conn) // another relay created it first: judge again
				continue
			}
			if err != nil {
				closeConn(conn)
				return nil, 0, nil, classify("create the replication slot", err)
			}
			pos = slotPosition{lsn: lsn, fresh: true}
			snap = &snapshotJob{name: name}
		}
		if b := s.backfill; b != nil && b.job != nil {
			// backfill.go: the chosen rows, in the new slot's snapshot
			// when there is one.
			job := *b.job
			if snap != nil {
				job.name = snap.name
			}
			snap, b.job = &job, nil
		}
		if pos.fresh {
			s.acked.Store(uint64(pos.lsn))
			s.saved.Store(0)
			// The relay reads everything the slot sends from here.
			s.lastTxn.Store(nil)
			s.noteTxn(&connector.CheckpointTxn{EndLSN: uint64(pos.lsn)})
		} else {
			s.advance(pos.lsn)
			if s.lastTxn.Load() == nil {
				// A checkpoint without last_txn (version 1), or none:
				// what the relay reads from here on proves the history.
				s.noteTxn(&connector.CheckpointTxn{EndLSN: s.acked.Load()})
			}
		}
		cp, ok := s.Checkpoint()
		if snap == nil && ok && cp.SnapshotPending {
			s.log.Warn("the snapshot of the outbox table was not all in Kafka when the relay stopped; publishing the table again, as it is now, before streaming (consumers drop the repeats by id)",
				"slot", s.cfg.Slot)
			snap = &snapshotJob{}
		}
		if snap != nil {
			s.snapshotting.Store(true)
		}
		s.needMark = s.recorder != nil && (!ok || snap != nil)
		if s.recorder == nil && (!ok || snap != nil) {
			// A first checkpoint at once: a slot dropped before the first
			// event is then caught too, and a snapshot cut short is
			// published again.
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.save(sctx)
			cancel()
			if err != nil {
				closeConn(conn)
				return nil, 0, nil, &checkpointError{err}
			}
		}
		// Starting at our own acknowledged position skips what Kafka
		// already has: after a reconnect, and after a start with a slot
		// behind the checkpoint. The server starts at the slot's
		// confirmed position when that is later (and at 0/0 means
		// exactly that).
		start := pglogrepl.LSN(s.acked.Load())
		if snap != nil {
			return conn, start, snap, nil
		}
		err = s.startReplication(ctx, conn, start)
		if err == nil {
			s.holder = 0
			return conn, start, nil, nil
		}
		closeConn(conn)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != pgerrcode.ObjectInUse {
			return nil, 0, nil, classify(fmt.Sprintf("start replication from slot %q", s.cfg.Slot), err)
		}
		// Another session took the slot between prepare's look and our
		// start: wait for it like any other holder.
		if err := sleep(ctx, slotPollInterval); err != nil {
			return nil, 0, nil, err
		}
	}
}

// startReplication starts streaming from the slot at start.
func (s *Source) startReplication(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN) error {
	pub := strings.ReplaceAll(pgx.Identifier{s.cfg.Publication}.Sanitize(), "'", "''")
	startCtx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	return pglogrepl.StartReplication(startCtx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
	})
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// deadConnError is a replication connection on which the server has been
// silent for longer than cdc.receive_timeout.
type deadConnError struct {
	slot            string
	silent, timeout time.Duration
}

func (e *deadConnError) Error() string {
	return fmt.Sprintf("replication from slot %q: the server has been silent for %s, longer than cdc.receive_timeout (%s); the connection is taken for dead",
		e.slot, e.silent.Round(time.Millisecond), e.timeout)
}

// stream is one replication session. Only its goroutine touches conn.
type stream struct {
	src  *Source
	conn *pgconn.PgConn
	out  chan<- connector.Batch
	rels pgoutput.Relations

	// The transaction being received.
	inTxn      bool
	xid        uint32
	commitTime time.Time
	// serverTime is the send time of the last XLogData, and stages the
	// times of the transaction being received (connector.Stages).
	serverTime time.Time
	stages     connector.Stages
	origin     string
	txnEvents  int
	batch      []connector.Event
	batchBytes int
	cols       []connector.Column // reused by every insert
	timer      *time.Timer        // emit's, reused

	// emitted is the end LSN of the last transaction handed to the runner;
	// once acked reaches it, nothing is in flight.
	emitted pglogrepl.LSN
	// skipBefore is where the stream was asked to start: a transaction
	// whose commit lies before it is in Kafka already. The server skips
	// those itself; the check costs one comparison a transaction.
	skipBefore pglogrepl.LSN
	skipTxn    bool
	txnLastID  string
	// cpFailed gets the checkpointer's failure.
	cpFailed <-chan error
	// eventsAt counts the events of this process up to the last complete
	// transaction handed on, and lastMark is when a checkpoint last went
	// with a batch (exactly once, txn.go).
	eventsAt int64
	lastMark time.Time

	nextStatus time.Time
	// nextConfirm is the earliest time for a status update that only
	// confirms a position Kafka acknowledged since the last one.
	nextConfirm time.Time
	// heard is when the server last said anything; time spent waiting
	// for the runner in emit, not reading, does not count as silence.
	heard    time.Time
	reported uint64
	lastWarn time.Time
}

func (st *stream) run(ctx context.Context) error {
	st.nextStatus = time.Now().Add(st.src.cfg.StatusInterval)
	st.heard = time.Now()
	timeout := st.src.cfg.ReceiveTimeout
	// Receiving is bounded by read deadlines on the connection itself, set
	// only when they move, and ctx's end sets one at once: given a context,
	// pgconn sets up and tears down a watch of it around every message, a
	// context and a timer besides, which cost 13% of the relay's CPU in a
	// drain. A deadline that passes is a timeout that leaves the
	// connection usable, as pgconn's own context handling relies on.
	nc := st.conn.Conn()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		_ = nc.SetReadDeadline(time.Now())
	})
	defer func() {
		// finish, which may run next, sets a deadline of its own: the
		// cancellation's must not land after it.
		if !stop() {
			<-cancelled
		}
	}()
	var set time.Time
	for {
		select {
		case err := <-st.cpFailed:
			return &checkpointError{err}
		default:
		}
		now := time.Now()
		switch {
		case !now.Before(st.nextStatus):
			if err := st.sendStatus(ctx, true); err != nil {
				return err
			}
		case st.src.saved.Load() != st.reported && !now.Before(st.nextConfirm):
			// Confirmed promptly, not only every status interval: what the
			// slot has not been told is published again after a crash.
			if err := st.confirm(ctx); err != nil {
				return err
			}
		}
		if !st.nextConfirm.After(now) {
			// Nothing new to confirm yet: look again a checkpoint interval on.
			st.nextConfirm = now.Add(st.src.cfg.CheckpointInterval)
		}
		// Receiving waits until the next status update is due, or until
		// the server has been silent for the receive timeout. Every status
		// update asks for a reply, so a live server is never that silent;
		// a connection a NAT or firewall dropped without a word is. While
		// events are in flight or unconfirmed, it wakes to confirm them.
		deadline := st.nextStatus
		if d := st.heard.Add(timeout); d.Before(deadline) {
			deadline = d
		}
		if uint64(st.emitted) > st.reported && st.nextConfirm.Before(deadline) {
			deadline = st.nextConfirm
		}
		if !deadline.Equal(set) {
			if err := nc.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("receive from slot %q: %w", st.src.cfg.Slot, err)
			}
			set = deadline
		}
		// Checked after setting the deadline: a cancellation from here on
		// runs the AfterFunc, whose deadline then comes last.
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg, err := st.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if silent := time.Since(st.heard); silent >= timeout {
					st.src.log.Warn("the replication connection is dead: PostgreSQL has not answered for longer than cdc.receive_timeout; closing it and reconnecting",
						"slot", st.src.cfg.Slot, "silent_for", silent.Round(time.Millisecond).String(), "receive_timeout", timeout.String(),
						"confirmed_lsn", st.src.ConfirmedLSN())
					return &deadConnError{slot: st.src.cfg.Slot, silent: silent, timeout: timeout}
				}
				continue
			}
			return fmt.Errorf("receive from slot %q: %w", st.src.cfg.Slot, err)
		}
		st.heard = time.Now()
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := st.handle(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return classify(fmt.Sprintf("replication from slot %q", st.src.cfg.Slot), pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone, *pgproto3.CommandComplete:
			return fmt.Errorf("replication from slot %q: the server ended the stream (shutting down?)", st.src.cfg.Slot)
		default:
			return fmt.Errorf("replication from slot %q: unexpected message %T", st.src.cfg.Slot, msg)
		}
	}
}

func (st *stream) handle(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		// Everything the server sent before this keepalive has arrived. If
		// Kafka has all of it, the slot may move to the server's position:
		// that is how an idle outbox table lets go of WAL that other
		// tables write.
		if !st.inTxn && st.src.acked.Load() >= uint64(st.emitted) {
			st.src.advance(ka.ServerWALEnd)
			st.emitted = max(st.emitted, ka.ServerWALEnd)
			if err := st.markIdle(ctx); err != nil {
				return err
			}
		}
		if ka.ReplyRequested {
			return st.sendStatus(ctx, false)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		st.serverTime = xld.ServerTime
		return st.decode(ctx, xld.WALData)
	}
	return nil
}

func (st *stream) decode(ctx context.Context, wal []byte) error {
	if len(wal) > 0 && wal[0] == byte(pglogrepl.MessageTypeInsert) {
		return st.insert(ctx, wal)
	}
	msg, err := pglogrepl.Parse(wal)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		st.src.noteRenamed(m)
		st.rels.Add(m)
	case *pglogrepl.BeginMessage:
		st.inTxn = true
		st.skipTxn = m.FinalLSN < st.skipBefore
		st.xid = m.Xid
		st.commitTime = m.CommitTime
		st.stages = connector.Stages{Sent: st.serverTime, Received: time.Now()}
		st.origin = "commit " + m.FinalLSN.String()
		st.txnEvents = 0
	case *pglogrepl.UpdateMessage:
		st.skip(m.RelationID, "UPDATE")
	case *pglogrepl.DeleteMessage:
		st.skip(m.RelationID, "DELETE")
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			st.skip(id, "TRUNCATE")
		}
	case *pglogrepl.CommitMessage:
		st.inTxn = false
		end := m.TransactionEndLSN
		proof := &connector.CheckpointTxn{Xid: st.xid, CommitLSN: uint64(m.CommitLSN), EndLSN: uint64(end), CommitTime: st.commitTime}
		if st.txnEvents == 0 && st.src.acked.Load() >= uint64(st.emitted) {
			// Nothing of ours, nothing in flight: confirmable at once.
			st.src.noteTxn(proof)
			st.src.advance(end)
			st.emitted = max(st.emitted, end)
			return st.markIdle(ctx)
		}
		src, n := st.src, int64(st.txnEvents)
		txn := &ackedTxn{end: end, commit: st.commitTime, lastID: st.txnLastID, proof: proof}
		if src.recorder != nil {
			st.eventsAt += n
			mark, done := src.markFuncs(txn, st.eventsAt, n, false)
			if err := st.emitWith(ctx, mark, done); err != nil {
				return err
			}
			st.emitted, st.lastMark = end, time.Now()
			return nil
		}
		if err := st.emit(ctx, func(err error) {
			if err == nil {
				src.lastAcked.Store(txn)
				src.events.Add(n)
				src.noteTxn(proof)
				src.advance(end)
			}
		}); err != nil {
			return err
		}
		st.emitted = end
	}
	return nil
}

// insert turns an Insert message into an event. Inserts are one message per
// event, so they are decoded in place (pgoutput.DecodeInsert) rather than
// through pglogrepl.Parse, which allocates some twenty times per row.
func (st *stream) insert(ctx context.Context, wal []byte) error {
	id, err := pgoutput.InsertRelation(wal)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	rel, tbl := st.ours(id)
	if tbl == nil || st.skipTxn {
		return nil
	}
	var e connector.Event
	cols, err := rel.DecodeInsert(wal, st.cols)
	switch {
	case errors.Is(err, pgoutput.ErrMalformed):
		return fmt.Errorf("parse pgoutput message: %w", err)
	case err != nil:
		e = connector.Event{CommitTime: st.commitTime, Origin: st.origin, Invalid: &connector.EventError{Origin: st.origin, Err: err}}
	default:
		// NewEvent copies what it keeps of cols, so cols is reused.
		st.cols = cols
		e = tbl.columns.NewEvent(cols, st.commitTime, st.origin)
	}
	e.Table, e.Stages = tbl.qualified, st.stages
	if inv, ok := e.Invalid.(*connector.EventError); ok {
		st.src.explainMissing(inv, rel, tbl)
	}
	st.txnLastID = e.ID
	st.batch = append(st.batch, e)
	st.batchBytes += eventBytes(&e)
	st.txnEvents++
	if len(st.batch) >= st.src.cfg.MaxBatchEvents || st.batchBytes >= st.src.cfg.MaxBatchBytes {
		// A large transaction goes on in chunks that cannot be
		// confirmed on their own: only its commit can.
		return st.emit(ctx, nil)
	}
	return nil
}

// eventBytes is what an event holds in memory, as cdc.max_batch_bytes
// counts it: every value it keeps, extra columns too (a large one of those
// weighs as much as a payload), and its fixed part.
func eventBytes(e *connector.Event) int {
	n := len(e.Payload) + len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.Type) + 64
	for _, c := range e.Extra {
		n += len(c.Value) + len(c.Name)
	}
	return n
}

// ours returns the relation and the outbox table it is, or a nil table
// when it is none. A publication the user made may cover other tables;
// their changes are not ours to relay. A table is known by its oid, so
// that a rename does not hide it, and by its name, so that one dropped
// and made again is still known.
func (st *stream) ours(id uint32) (*pgoutput.Relation, *table) {
	rel, ok := st.rels[id]
	if !ok {
		return nil, nil
	}
	for i := range st.src.tables {
		if t := &st.src.tables[i]; id == t.oid || (rel.Namespace == t.schema && rel.Name == t.name) {
			return rel, t
		}
	}
	return nil, nil
}

// noteRenamed warns when an outbox table comes under another name than
// the configured one: renamed or moved to another schema while the relay
// ran, or, replayed from before a rename, under its old name. ours still
// knows it by its oid; the next start looks it up by the configured name.
func (s *Source) noteRenamed(m *pglogrepl.RelationMessage) {
	for _, t := range s.tables {
		if t.oid == m.RelationID && (m.Namespace != t.schema || m.RelationName != t.name) {
			s.log.Warn("the outbox table's changes come under another name, renamed or moved; relaying them by the table's oid. Set outbox.table to its current name before the next start",
				"table", t.String(), "name", m.Namespace+"."+m.RelationName)
		}
	}
}

// explainMissing says, of an event whose routed column is not in the
// table at all (renamed or dropped while the relay ran, which the
// relation message announced), which column, which table, and the ways on.
func (s *Source) explainMissing(inv *connector.EventError, rel *pgoutput.Relation, t *table) {
	m := t.columns
	for _, name := range []string{m.ID, m.AggregateType, m.AggregateID} {
		if !slices.ContainsFunc(rel.Columns, func(c pgoutput.Column) bool { return c.Name == name }) {
			inv.Err = fmt.Errorf("outbox table %s has no column %q any more (renamed or dropped; it has %s): rename it back, or map the new name under outbox.columns and restart, or set kafka.dead_letter_topic to pass such rows there: %w",
				t, name, relColumns(rel), inv.Err)
			return
		}
	}
}

func relColumns(rel *pgoutput.Relation) string {
	names := make([]string, len(rel.Columns))
	for i, c := range rel.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// skip counts a change that is not an insert. Logging each one would flood
// the log of a table that is cleaned with DELETE; once a minute says it.
func (st *stream) skip(id uint32, op string) {
	if _, t := st.ours(id); t == nil {
		return
	}
	n := st.src.skipped.Add(1)
	if time.Since(st.lastWarn) >= time.Minute {
		st.lastWarn = time.Now()
		st.src.log.Warn("skipping changes to the outbox table that are not inserts; only inserted rows are events",
			"op", op, "at", st.origin, "skipped_total", n,
			"hint", "publish only inserts: ALTER PUBLICATION ... SET (publish = 'insert')")
	}
}

// emit hands the current batch to the runner. While the runner is busy it
// keeps the status updates going, so the server does not time out a
// session that is only waiting for Kafka.
func (st *stream) emit(ctx context.Context, done func(error)) error {
	return st.emitWith(ctx, nil, done)
}

// emitWith is emit with a checkpoint for the batch (exactly once, txn.go).
func (st *stream) emitWith(ctx context.Context, mark func() (*connector.Message, error), done func(error)) error {
	// The batch is gathered in a slice that is reused, and handed on as an
	// exact copy: growing a new slice for every batch by appending copied
	// each event twice on average and was a sixth of the bytes the relay
	// allocated in a drain.
	b := connector.Batch{Events: slices.Clone(st.batch), Done: done, Checkpoint: mark}
	clear(st.batch) // let go of the payloads
	st.batch, st.batchBytes = st.batch[:0], 0
	select {
	case st.out <- b:
		return nil
	default:
	}
	for {
		if st.timer == nil {
			st.timer = time.NewTimer(time.Until(st.nextStatus))
		} else {
			st.timer.Reset(time.Until(st.nextStatus))
		}
		select {
		case st.out <- b:
			st.timer.Stop()
			st.heard = time.Now()
			return nil
		case <-st.timer.C:
			if err := st.sendStatus(ctx, true); err != nil {
				return err
			}
		case err := <-st.cpFailed:
			st.timer.Stop()
			return &checkpointError{err}
		case <-ctx.Done():
			st.timer.Stop()
			return ctx.Err()
		}
	}
}

// finish ends a session that is stopping: a last status update, so that the
// slot holds what Kafka has, then the end of the stream (CopyDone), waiting
// for the server's own CopyDone. Closing the socket right after the update
// is not enough: while the server is still sending, a close with unread
// data resets the connection, and a walsender whose next send fails on the
// reset exits without reading the update that waits in its receive buffer.
// The slot then stays behind what Kafka acknowledged and the next start
// repeats those events (GracefulRestartMidStream saw hundreds). The server
// reads our messages in order, so its CopyDone means it applied the update.
func (st *stream) finish(ctx context.Context) error {
	if err := st.sendStatus(ctx, false); err != nil {
		return err
	}
	// Whatever read deadline the receive loop left is replaced by ctx's.
	if err := st.conn.Conn().SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("end the stream from slot %q: %w", st.src.cfg.Slot, err)
	}
	st.conn.Frontend().Send(&pgproto3.CopyDone{})
	if err := st.conn.Frontend().Flush(); err != nil {
		return fmt.Errorf("end the stream from slot %q: %w", st.src.cfg.Slot, err)
	}
	for {
		msg, err := st.conn.ReceiveMessage(ctx)
		if err != nil {
			return fmt.Errorf("end the stream from slot %q: %w", st.src.cfg.Slot, err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyDone, *pgproto3.CommandComplete, *pgproto3.ReadyForQuery:
			return nil
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("end the stream from slot %q: %w", st.src.cfg.Slot, pgconn.ErrorResponseToPgError(msg))
		}
		// Changes the server sent before it read our CopyDone are dropped:
		// they come again from the confirmed position.
	}
}

// confirm sends a status update for a position Kafka acknowledged since
// the last one, without asking for a reply, and keeps the next such update
// a confirm interval away.
func (st *stream) confirm(ctx context.Context) error {
	st.nextConfirm = time.Now().Add(st.src.cfg.CheckpointInterval)
	return st.report(ctx, false)
}

// sendStatus reports the acknowledged position as written, flushed and
// applied: the server may recycle WAL before it, and a restart resumes
// after it. With reply, it asks the server to answer at once (with a
// keepalive), which is what bounds a live server's silence.
func (st *stream) sendStatus(ctx context.Context, reply bool) error {
	st.nextStatus = time.Now().Add(st.src.cfg.StatusInterval)
	return st.report(ctx, reply)
}

// report sends the checkpoint's position to the server: what Kafka has
// acknowledged and a checkpoint holds.
func (st *stream) report(ctx context.Context, reply bool) error {
	lsn := pglogrepl.LSN(st.src.saved.Load())
	if lsn == 0 {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, st.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn,
		WALFlushPosition: lsn,
		WALApplyPosition: lsn,
		ClientTime:       time.Now(),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("send status update to slot %q: %w", st.src.cfg.Slot, err)
	}
	if uint64(lsn) != st.reported {
		st.reported = uint64(lsn)
		st.src.log.Debug("confirmed position", "slot", st.src.cfg.Slot, "lsn", lsn)
	}
	return nil
}
