package cdc

import (
	"context"
	"fmt"
	"slices"
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

// stream is one replication session: it receives what the slot sends,
// hands the events on to the runner in batches (decode.go), and keeps the
// server told of the position the checkpoint holds. It runs on Run's
// goroutine, the only one that touches it and its connection; what other
// goroutines see of it, the position and the counters, is the Source's.
type stream struct {
	src  *Source
	conn *pgconn.PgConn
	out  chan<- connector.Batch
	rels pgoutput.Relations
	// saver saves the checkpoints the position says are due (save.go);
	// nil when the sink commits them (txn.go).
	saver *saver

	txn    receiving // the transaction being received
	batch  pending   // what is decoded and not handed on yet
	clock  schedule  // when to speak to the server next
	bulk   bulkRead  // how the socket wakes the stream (coalesce.go)
	warned warnedAt
}

// receiving is the source transaction the stream is receiving, from its
// BEGIN to its COMMIT.
type receiving struct {
	open bool
	// skip: it commits before the stream's start, so Kafka has it
	// (positions.skips).
	skip       bool
	xid        uint32
	commitTime time.Time
	// sent is the send time of the last XLogData, and stages the times of
	// the transaction (connector.Stages).
	sent   time.Time
	stages connector.Stages
	origin string
	events int // its events so far
	// lastID is the id of the last event received, in it or, while it
	// has none, in an earlier one: the last event a checkpoint names.
	lastID string
	cols   []connector.Column // reused by every insert
}

// begin starts the transaction m begins; skip: Kafka has it.
func (r *receiving) begin(m *pglogrepl.BeginMessage, skip bool) {
	r.open, r.skip = true, skip
	r.xid, r.commitTime = m.Xid, m.CommitTime
	r.stages = connector.Stages{Sent: r.sent, Received: time.Now()}
	r.origin = "commit " + m.FinalLSN.String()
	r.events = 0
}

// pending is what the stream has decoded and not yet handed on: whole
// transactions held at its head (coalesce.go), then the events of the
// transaction being received.
type pending struct {
	events []connector.Event
	bytes  int
	held   held
}

// take removes the first n events, of size bytes, and returns them. They
// are gathered in a slice that is reused, and handed on as an exact copy:
// a batch grown by appending would copy each event about twice more, and
// keep spare room besides.
func (p *pending) take(n, bytes int) []connector.Event {
	events := slices.Clone(p.events[:n])
	rest := copy(p.events, p.events[n:])
	clear(p.events[rest:]) // let go of the payloads
	p.events, p.bytes = p.events[:rest], p.bytes-bytes
	return events
}

// schedule is when the stream next speaks to the server, and when it last
// heard from it.
type schedule struct {
	// nextStatus is when the next status update goes, asking for a reply.
	nextStatus time.Time
	// nextCheckpoint is the next checkpoint tick (keepUp), every
	// cdc.checkpoint_interval.
	nextCheckpoint time.Time
	// heard is when the server last said anything; time spent waiting for
	// the runner, not reading, does not count as silence.
	heard time.Time
	// deadline is the read deadline set on the connection.
	deadline time.Time
	// lastLook, once the receive timeout has passed, is until when the
	// stream still reads before it takes the connection for dead: a relay
	// that was itself held up (a stall, a starved CPU) looks once more at
	// what has arrived meanwhile before it blames the server.
	lastLook time.Time
	timer    *time.Timer // the wait for the runner's, reused
}

// hear records that the server spoke at now, or that the stream was busy
// handing on and not reading until then.
func (c *schedule) hear(now time.Time) { c.heard, c.lastLook = now, time.Time{} }

// warnedAt is when a skipped change (decode.go) and a skipped logical
// decoding message (message.go) were last logged.
type warnedAt struct{ skip, message time.Time }

// run receives from the slot until ctx ends or the session fails. Each
// turn does what has fallen due (keepUp), sets the read deadline to when
// the next thing falls due, and takes what arrives.
func (st *stream) run(ctx context.Context) error {
	now := time.Now()
	st.clock.nextStatus, st.clock.heard = now.Add(st.src.cfg.speakEvery()), now
	defer st.interruptOnCancel(ctx)()
	for {
		now := time.Now()
		pos, err := st.keepUp(ctx, now)
		if err != nil {
			return err
		}
		if err := st.setDeadline(now, pos); err != nil {
			return err
		}
		// Checked after setting the deadline: a cancellation from here on
		// runs the AfterFunc, whose deadline then comes last.
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg, err := st.conn.ReceiveMessage(context.Background())
		if err != nil {
			if err := st.receiveFailed(ctx, err); err != nil {
				return err
			}
			continue
		}
		st.clock.hear(time.Now())
		if err := st.take(ctx, msg); err != nil {
			return err
		}
	}
}

// interruptOnCancel makes ctx's end interrupt a receive at once, with a
// read deadline that has passed, and returns what undoes it. Receiving is
// bounded by read deadlines on the connection itself, set only when they
// move: given a context, pgconn sets up and tears down a watch of it
// around every message, a context and a timer besides, a cost per event
// the stream need not pay. A deadline that passes is a timeout that
// leaves the connection usable, as pgconn's own context handling relies
// on.
func (st *stream) interruptOnCancel(ctx context.Context) (undo func()) {
	nc := st.conn.Conn()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		_ = nc.SetReadDeadline(time.Now())
	})
	return func() {
		// finish, which may run next, sets a deadline of its own: the
		// cancellation's must not land after it.
		if !stop() {
			<-cancelled
		}
		// finish waits for the server's few last bytes.
		st.stopCoalescing()
	}
}

// keepUp does what has fallen due at now besides receiving, and returns
// the position as it leaves it. A failed save ends the stream. The status
// update goes every status interval. At each checkpoint tick a checkpoint
// saved since the last one is confirmed to the slot, promptly rather than
// only every status interval, since what the slot has not been told is
// published again after a crash; then the next save begins, if one is due.
func (st *stream) keepUp(ctx context.Context, now time.Time) (positions, error) {
	select {
	case err := <-st.saver.failures():
		return positions{}, &checkpointError{err}
	default:
	}
	c := &st.clock
	tick := !now.Before(c.nextCheckpoint)
	if tick {
		c.nextCheckpoint = now.Add(st.src.cfg.CheckpointInterval)
	}
	switch {
	case !now.Before(c.nextStatus):
		if err := st.sendStatus(ctx, true); err != nil {
			return positions{}, err
		}
	case tick && st.src.pos.get().confirmDue():
		if err := st.report(ctx, false); err != nil {
			return positions{}, err
		}
	}
	if tick {
		st.saver.begin(now)
	}
	return st.src.pos.get(), nil
}

// nextWake is when keepUp next has something to do: the next status
// update, and the next checkpoint tick while the position has something
// to confirm or save (positions.checkpointWake).
func (st *stream) nextWake(pos positions) time.Time {
	c := &st.clock
	if pos.checkpointWake() && c.nextCheckpoint.Before(c.nextStatus) {
		return c.nextCheckpoint
	}
	return c.nextStatus
}

// setDeadline sets the read deadline for the next receive: when keepUp
// next has something to do, or when the server will have been silent for
// the receive timeout. Every status update asks for a reply, so a live
// server is never that silent; a connection a NAT or firewall dropped
// without a word is.
func (st *stream) setDeadline(now time.Time, pos positions) error {
	c := &st.clock
	deadline := st.nextWake(pos)
	silence := c.heard.Add(st.src.cfg.ReceiveTimeout)
	if c.lastLook.After(silence) {
		silence = c.lastLook
	}
	if silence.Before(deadline) {
		deadline = silence
	}
	deadline = st.readDeadline(now, deadline, c.deadline) // coalesce.go
	if deadline.Equal(c.deadline) {
		return nil
	}
	if err := st.conn.Conn().SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("receive from slot %q: %w", st.src.cfg.Slot, err)
	}
	c.deadline = deadline
	return nil
}

// receiveFailed takes a receive that failed with err. A read deadline
// that passed is no failure: nothing more has come for now, so what is
// held goes on; only a server silent for longer than the receive timeout
// is one.
func (st *stream) receiveFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !pgconn.Timeout(err) {
		return fmt.Errorf("receive from slot %q: %w", st.src.cfg.Slot, err)
	}
	if err := st.release(ctx); err != nil {
		return err
	}
	timeout := st.src.cfg.ReceiveTimeout
	silent := time.Since(st.clock.heard)
	if silent >= timeout && st.clock.lastLook.IsZero() {
		st.clock.lastLook = time.Now().Add(lastLookFor(timeout))
		return nil
	}
	if silent >= timeout && !time.Now().Before(st.clock.lastLook) {
		st.src.log.Warn("the replication connection is dead: PostgreSQL has not answered for longer than cdc.receive_timeout; closing it and reconnecting",
			"slot", st.src.cfg.Slot, "silent_for", silent.Round(time.Millisecond).String(), "receive_timeout", timeout.String(),
			"confirmed_lsn", st.src.ConfirmedLSN())
		return &deadConnError{slot: st.src.cfg.Slot, silent: silent, timeout: timeout}
	}
	return nil
}

// lastLookFor is how long the stream reads on once the receive timeout
// has passed, before it takes the connection for dead.
func lastLookFor(timeout time.Duration) time.Duration { return min(500*time.Millisecond, timeout/10) }

// take takes a message the server sent.
func (st *stream) take(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		return st.handle(ctx, msg.Data)
	case *pgproto3.ErrorResponse:
		return classify(fmt.Sprintf("replication from slot %q", st.src.cfg.Slot), pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone, *pgproto3.CommandComplete:
		return fmt.Errorf("replication from slot %q: the server ended the stream (shutting down?)", st.src.cfg.Slot)
	default:
		return fmt.Errorf("replication from slot %q: unexpected message %T", st.src.cfg.Slot, msg)
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
		if !st.txn.open && st.pass(ka.ServerWALEnd, nil) {
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
		st.txn.sent = xld.ServerTime
		return st.decode(ctx, xld.WALData) // decode.go
	}
	return nil
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
// Done, either of which may be nil; the rest stay in the batch.
func (st *stream) emitWith(ctx context.Context, n, bytes int, mark func() (*connector.Message, error), done func(error)) error {
	b := connector.Batch{Events: st.batch.take(n, bytes), Done: st.src.handed.track(done), Checkpoint: mark}
	select {
	case st.out <- b:
		return nil
	default:
	}
	err := st.awaitRunner(ctx, b)
	if err != nil && b.Done != nil {
		st.src.handed.untrack()
	}
	return err
}

// awaitRunner hands b on once the runner takes it. While the runner is
// busy it keeps up (keepUp), so that the server does not time out a
// session that is only waiting for Kafka, and what Kafka acknowledges
// meanwhile is saved and confirmed.
func (st *stream) awaitRunner(ctx context.Context, b connector.Batch) error {
	c := &st.clock
	for {
		wait := time.Until(st.nextWake(st.src.pos.get()))
		if c.timer == nil {
			c.timer = time.NewTimer(wait)
		} else {
			c.timer.Reset(wait)
		}
		select {
		case st.out <- b:
			c.timer.Stop()
			c.hear(time.Now())
			return nil
		case <-c.timer.C:
			if _, err := st.keepUp(ctx, time.Now()); err != nil {
				return err
			}
		case err := <-st.saver.failures():
			c.timer.Stop()
			return &checkpointError{err}
		case <-ctx.Done():
			c.timer.Stop()
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
// repeats those events. The server reads our messages in order, so its
// CopyDone means it applied the update.
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

// sendStatus reports the acknowledged position as written, flushed and
// applied: the server may recycle WAL before it, and a restart resumes
// after it. With reply, it asks the server to answer at once (with a
// keepalive), which is what bounds a live server's silence.
func (st *stream) sendStatus(ctx context.Context, reply bool) error {
	st.clock.nextStatus = time.Now().Add(st.src.cfg.speakEvery())
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
