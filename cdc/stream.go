package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxrelay/outboxrelay/cdc/internal/pgoutput"
	"github.com/outboxrelay/outboxrelay/connector"
)

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

	// skipBefore is where the stream was asked to start: a transaction
	// whose commit lies before it is in Kafka already. The server skips
	// those itself; the check costs one comparison a transaction.
	skipBefore pglogrepl.LSN
	skipTxn    bool
	txnLastID  string
	// cpFailed gets the checkpointer's failure.
	cpFailed <-chan error
	// eventsAt counts the events of this process up to the last complete
	// transaction handed on or held (coalesce.go), and lastMark is when a
	// checkpoint last went with a batch or a held transaction, which
	// counts from when that transaction began to arrive (exactly once,
	// txn.go).
	eventsAt int64
	lastMark time.Time

	nextStatus time.Time
	// nextConfirm is the earliest time for a status update that only
	// confirms a position Kafka acknowledged since the last one.
	nextConfirm time.Time
	// heard is when the server last said anything; time spent waiting
	// for the runner in emit, not reading, does not count as silence.
	heard    time.Time
	lastWarn time.Time
	// lastMsgWarn is when a skipped logical decoding message was last
	// logged (message.go).
	lastMsgWarn time.Time
	// coalescing is set while the socket wakes the relay only for a
	// backlog's worth of bytes (coalesce.go); coalesceFailed once setting
	// it failed.
	coalescing, coalesceFailed bool
	// backlog is set while the server sends transactions well after they
	// committed, and held the whole ones not handed on yet (coalesce.go).
	backlog bool
	held    held
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
		// finish waits for the server's few last bytes.
		if st.coalescing {
			_ = setRcvLowat(nc, 1)
			st.coalescing = false
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
		pos := st.src.pos.get()
		switch {
		case !now.Before(st.nextStatus):
			if err := st.sendStatus(ctx, true); err != nil {
				return err
			}
			pos = st.src.pos.get()
		case pos.confirmDue() && !now.Before(st.nextConfirm):
			// Confirmed promptly, not only every status interval: what the
			// slot has not been told is published again after a crash.
			if err := st.confirm(ctx); err != nil {
				return err
			}
			pos = st.src.pos.get()
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
		if pos.unconfirmed() && st.nextConfirm.Before(deadline) {
			deadline = st.nextConfirm
		}
		deadline = st.readDeadline(now, deadline, set)
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
				// Nothing more has come for now: what is held goes on.
				if err := st.release(ctx); err != nil {
					return err
				}
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
		if !st.inTxn && st.pass(ka.ServerWALEnd, nil) {
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
		st.src.adoptTable(m) // patterns.go
		st.rels.Add(m)
	case *pglogrepl.BeginMessage:
		st.inTxn = true
		st.skipTxn = m.FinalLSN < st.skipBefore
		st.xid = m.Xid
		st.commitTime = m.CommitTime
		st.stages = connector.Stages{Sent: st.serverTime, Received: time.Now()}
		st.noteLag(st.serverTime, m.CommitTime)
		st.origin = "commit " + m.FinalLSN.String()
		st.txnEvents = 0
	case *pglogrepl.LogicalDecodingMessage:
		return st.message(ctx, m)
	case *pglogrepl.UpdateMessage:
		if st.src.cfg.OnUpdate == UpdateFail {
			return st.refuseUpdate(ctx, m)
		}
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
		if st.txnEvents == 0 && st.pass(end, proof) {
			// Nothing of ours, nothing in flight: confirmable at once.
			return st.markIdle(ctx)
		}
		n := int64(st.txnEvents)
		st.eventsAt += n
		mark, done := st.src.checkpoint(&ackedTxn{end: end, commit: st.commitTime, lastID: st.txnLastID, proof: proof}, st.eventsAt, n, false)
		// Held counts as handed on: nothing passes it (pass), and it
		// goes to the runner before anything waits for it (awaitAcked).
		st.src.pos.update(func(p *positions) { p.emitted = end })
		st.lastMark = st.stages.Received
		return st.hold(ctx, mark, done)
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
	return st.add(ctx, e)
}

// add puts an event of the transaction being received into the batch,
// handing the batch on when it is full.
func (st *stream) add(ctx context.Context, e connector.Event) error {
	st.txnLastID = e.ID
	st.batch = append(st.batch, e)
	st.batchBytes += eventBytes(&e)
	st.txnEvents++
	if st.full() {
		// The whole transactions before this one go on first, with
		// their Done. A large transaction goes on in chunks that cannot
		// be confirmed on their own: only its commit can.
		if err := st.release(ctx); err != nil {
			return err
		}
		if st.full() {
			return st.emitWith(ctx, len(st.batch), st.batchBytes, nil, nil)
		}
	}
	return nil
}

func (st *stream) full() bool {
	return len(st.batch) >= st.src.cfg.MaxBatchEvents || st.batchBytes >= st.src.cfg.MaxBatchBytes
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

// pass moves the position past end while nothing is in flight
// (positions.pass).
func (st *stream) pass(end pglogrepl.LSN, proof *connector.CheckpointTxn) bool {
	var passed bool
	st.src.pos.update(func(p *positions) { passed = p.pass(end, proof) })
	return passed
}

// emitWith hands the first n events of the batch, of size bytes, to the
// runner, with a checkpoint for them (exactly once, txn.go) and their
// Done, either of which may be nil; the rest stay in the batch. While the
// runner is busy it keeps the status updates going, so the server does
// not time out a session that is only waiting for Kafka.
func (st *stream) emitWith(ctx context.Context, n, bytes int, mark func() (*connector.Message, error), done func(error)) error {
	// The batch is gathered in a slice that is reused, and handed on as an
	// exact copy: growing a new slice for every batch by appending copied
	// each event twice on average and was a sixth of the bytes the relay
	// allocated in a drain.
	b := connector.Batch{Events: slices.Clone(st.batch[:n]), Done: done, Checkpoint: mark}
	rest := copy(st.batch, st.batch[n:])
	clear(st.batch[rest:]) // let go of the payloads
	st.batch, st.batchBytes = st.batch[:rest], st.batchBytes-bytes
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
// acknowledged and a checkpoint holds. Before the first checkpoint there is
// none, and the update says 0/0, which the server takes for "nothing
// confirmed" (walsender.c moves a slot only for a valid flush position):
// it is sent all the same, so that a session waiting for Kafka still
// answers the server's keepalives and finds out, at its next write, that
// its connection is gone, and the runner drops what it has not sent.
func (st *stream) report(ctx context.Context, reply bool) error {
	lsn, _ := st.src.pos.get().report()
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
	var moved bool
	st.src.pos.update(func(p *positions) {
		moved = p.reported != lsn
		p.reported = lsn
	})
	if moved {
		st.src.log.Debug("confirmed position", "slot", st.src.cfg.Slot, "lsn", lsn)
	}
	return nil
}
