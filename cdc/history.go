package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// A restore is caught by position alone (CauseBehind) only while the
// restored server's WAL is short of the checkpoint. Once the server has
// written past it, what committed after the restore point sits at
// positions the checkpoint says were relayed, and streaming from the
// checkpoint would skip it without a word. Positions cannot tell the two
// histories apart; the transactions at them can.
//
// So every checkpoint names the last transaction the slot sent that ended
// at or before its position (connector.CheckpointTxn: xid, commit LSN,
// end, commit time), and the slot sent nothing between that end and the
// position. When the slot is behind the checkpoint at a start or
// reconnect (a crash between saving a checkpoint and confirming it, or a
// restored server, whose slot is as the copy left it), the relay first
// replays the slot, on a replication session of its own that confirms
// nothing, from that transaction's commit to the checkpoint: the same
// history sends that transaction first, at the same commit LSN with the
// same xid and commit time, and nothing else before the checkpoint. Any
// other transaction there is one the relay never received and would skip:
// the history differs (CauseRestored). A slot at the checkpoint needs no
// replay: on a restored server the slot cannot be confirmed past the
// copy's own WAL, so the copy was taken after the checkpoint.
//
// The xid alone would not do: a restored server hands out the same xids
// again, to other transactions. The commit LSN never repeats within one
// history, and the commit time tells a transaction written again at the
// same position by a replayed workload.
//
// Cost: nothing in the steady state, no WAL record, no query. A start or
// reconnect that finds the slot behind the checkpoint opens one more
// replication session, whose server decodes from the slot's restart_lsn
// as any session does and sends the one transaction. It needs what the
// relay has already: a role with REPLICATION and the slot.

// historyFinding is what the replay found, for the checkpoint at end and
// the slot at confirmed.
type historyFinding struct {
	end       uint64
	confirmed pglogrepl.LSN
	differs   bool
	detail    string
}

// historyCheck follows a replay of the slot and decides whether it is the
// history the checkpoint was taken from. It is fed what the slot sends, in
// order, until it is done.
type historyCheck struct {
	want connector.CheckpointTxn
	end  pglogrepl.LSN // the checkpoint's position
	from pglogrepl.LSN // the slot's confirmed position
	seen bool
}

func newHistoryCheck(want connector.CheckpointTxn, end uint64, from pglogrepl.LSN) *historyCheck {
	return &historyCheck{want: want, end: pglogrepl.LSN(end), from: from}
}

// expectTxn reports whether the replay must still send the checkpoint's
// transaction: there is one, the slot is before its end, and it has not
// come yet.
func (h *historyCheck) expectTxn() bool {
	return h.want.Xid != 0 && uint64(h.from) < h.want.EndLSN && !h.seen
}

// start is where the replay asks the slot to start: the server sends the
// transactions that commit there or later.
func (h *historyCheck) start() pglogrepl.LSN {
	if h.expectTxn() {
		return max(h.from, pglogrepl.LSN(h.want.CommitLSN))
	}
	return max(h.from, pglogrepl.LSN(h.want.EndLSN))
}

func (h *historyCheck) txnWords() string {
	return fmt.Sprintf("xid %d committed at %s (%s)", h.want.Xid, pglogrepl.LSN(h.want.CommitLSN), h.want.CommitTime.UTC().Format(time.RFC3339Nano))
}

// begin takes a transaction the slot sent. done: decided, and differs
// says how the history differs (empty: it is the same).
func (h *historyCheck) begin(xid uint32, commitLSN pglogrepl.LSN, commit time.Time) (done bool, differs string) {
	if h.expectTxn() {
		switch {
		case uint64(commitLSN) < h.want.CommitLSN:
			return false, "" // before the start; the server skips these
		case uint64(commitLSN) == h.want.CommitLSN && xid == h.want.Xid && commit.Equal(h.want.CommitTime):
			h.seen = true
			// Nothing can commit between its commit and its end.
			return h.want.EndLSN >= uint64(h.end), ""
		}
		return true, fmt.Sprintf("the last transaction the relay received before the checkpoint, %s, is not in this server's history: in its place the slot sends xid %d committed at %s (%s)",
			h.txnWords(), xid, commitLSN, commit.UTC().Format(time.RFC3339Nano))
	}
	if commitLSN < h.end {
		after := pglogrepl.LSN(h.want.EndLSN).String() + ", where the relay began reading the slot,"
		if h.want.Xid != 0 {
			after = "the end of the last transaction the relay received before the checkpoint (" + h.txnWords() + ")"
		}
		return true, fmt.Sprintf("the slot sends xid %d committed at %s (%s), between %s and the checkpoint %s, where the relay received no transaction",
			xid, commitLSN, commit.UTC().Format(time.RFC3339Nano), after, h.end)
	}
	return true, ""
}

// keepalive takes a keepalive: the server has sent every transaction that
// commits before wal.
func (h *historyCheck) keepalive(wal pglogrepl.LSN) (done bool, differs string) {
	if h.expectTxn() {
		if uint64(wal) >= h.want.EndLSN {
			return true, fmt.Sprintf("the last transaction the relay received before the checkpoint, %s, is not in this server's history: the slot passed %s without it",
				h.txnWords(), wal)
		}
		return false, ""
	}
	return wal >= h.end, ""
}

// checkHistory replays the slot when it is behind the checkpoint, and
// returns what it found, for judge (nil: no replay was needed). conn is
// prepare's connection.
func (s *Source) checkHistory(ctx context.Context, conn *pgx.Conn) (*historyFinding, error) {
	cp, ok := s.Checkpoint()
	if !ok || cp.Key != s.key() {
		return nil, nil
	}
	qctx, cancel := s.cfg.Network.Query(ctx)
	slot, err := s.readSlot(qctx, conn)
	cancel()
	if err != nil {
		return nil, err
	}
	if !slot.exists || slot.lost || uint64(slot.confirmed) >= cp.EndLSN || slot.wal == 0 || uint64(slot.wal) < cp.EndLSN {
		return nil, nil // judge needs no replay for these
	}
	if !cp.LastTxn.Known() {
		s.log.Info("the slot is behind the checkpoint, and the checkpoint has no last_txn (version 1, written by an older relay), so the relay cannot check that this server's history is the one it relayed: "+
			"a restore from a copy taken before the checkpoint, after which the server wrote past it, would go unnoticed; the checkpoints written from now on carry it",
			"slot", s.cfg.Slot, "checkpoint_lsn", pglogrepl.LSN(cp.EndLSN).String(), "confirmed_lsn", slot.confirmed.String(), "relay_version", cp.RelayVersion)
		return nil, nil
	}
	chk := newHistoryCheck(cp.LastTxn, cp.EndLSN, slot.confirmed)
	detail, err := s.replay(ctx, conn, chk)
	if err != nil {
		return nil, err
	}
	if detail == "" {
		s.log.Debug("replayed the slot to the checkpoint: the server's history is the one relayed", "slot", s.cfg.Slot,
			"from_lsn", chk.start().String(), "checkpoint_lsn", pglogrepl.LSN(cp.EndLSN).String())
	}
	return &historyFinding{end: cp.EndLSN, confirmed: slot.confirmed, differs: detail != "", detail: detail}, nil
}

// replay streams from the slot on a session of its own until chk decides,
// confirming nothing past the slot's position, and returns how the
// history differs (empty: it does not). It then waits for the server to
// let go of the slot, so that the relay's own session can take it.
func (s *Source) replay(ctx context.Context, conn *pgx.Conn, chk *historyCheck) (string, error) {
	rconn, err := s.openReplication(ctx)
	if err != nil {
		return "", classify("open a replication connection to check the slot's history", err)
	}
	detail, err := s.replayOn(ctx, rconn, chk)
	pgsql.Close(ctx, rconn)
	if err != nil {
		return "", err
	}
	// The walsender ends a moment after the connection closes.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		qctx, cancel := s.cfg.Network.Query(ctx)
		var pid *int32
		err := conn.QueryRow(qctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&pid)
		cancel()
		if err != nil || pid == nil {
			break
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
	}
	return detail, nil
}

func (s *Source) replayOn(ctx context.Context, conn *pgconn.PgConn, chk *historyCheck) (string, error) {
	start := chk.start()
	if err := s.startReplication(ctx, conn, start); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.ObjectInUse {
			return "", fmt.Errorf("check the history of replication slot %q: another session took the slot: %w", s.cfg.Slot, err)
		}
		return "", classify(fmt.Sprintf("replay slot %q from %s to check the server's history", s.cfg.Slot, start), err)
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ReceiveTimeout)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", classify(fmt.Sprintf("replay slot %q to check the server's history (nothing heard for cdc.receive_timeout %s?)", s.cfg.Slot, s.cfg.ReceiveTimeout), err)
		}
		var done bool
		var differs string
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			done, differs, err = s.replayMessage(ctx, conn, chk, msg.Data)
			if err != nil {
				return "", err
			}
		case *pgproto3.ErrorResponse:
			return "", classify(fmt.Sprintf("replay slot %q to check the server's history", s.cfg.Slot), pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone, *pgproto3.CommandComplete:
			return "", fmt.Errorf("replay slot %q to check the server's history: the server ended the stream (shutting down?)", s.cfg.Slot)
		}
		if done {
			return differs, nil
		}
	}
}

func (s *Source) replayMessage(ctx context.Context, conn *pgconn.PgConn, chk *historyCheck, data []byte) (bool, string, error) {
	if len(data) == 0 {
		return false, "", nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return false, "", fmt.Errorf("parse keepalive: %w", err)
		}
		if done, differs := chk.keepalive(ka.ServerWALEnd); done {
			return true, differs, nil
		}
		if ka.ReplyRequested {
			// The slot's own position: confirms nothing new.
			err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: chk.from})
			if err != nil {
				return false, "", classify("send a status update while checking the slot's history", err)
			}
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return false, "", fmt.Errorf("parse XLogData: %w", err)
		}
		if len(xld.WALData) == 0 || xld.WALData[0] != byte(pglogrepl.MessageTypeBegin) {
			return false, "", nil
		}
		msg, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return false, "", fmt.Errorf("parse pgoutput message: %w", err)
		}
		if b, ok := msg.(*pglogrepl.BeginMessage); ok {
			done, differs := chk.begin(b.Xid, b.FinalLSN, b.CommitTime)
			return done, differs, nil
		}
	}
	return false, "", nil
}
