package cdc

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// TestHistoryCheck feeds the check what a replay of the slot sends, and
// wants the verdict: the same history, another (with what differs), or
// none yet. The checkpoint is at 0/500; its last transaction is xid 900,
// committed at 0/400, ending at 0/430.
func TestHistoryCheck(t *testing.T) {
	at := time.Date(2026, 11, 24, 7, 0, 0, 123456000, time.UTC)
	x := connector.CheckpointTxn{Xid: 900, CommitLSN: 0x400, EndLSN: 0x430, CommitTime: at}
	none := connector.CheckpointTxn{EndLSN: 0x300} // read from 0/300, nothing received since
	type sent struct {
		keepalive pglogrepl.LSN // else a transaction:
		xid       uint32
		commit    pglogrepl.LSN
		time      time.Time
	}
	txn := func(xid uint32, commit pglogrepl.LSN, t time.Time) sent {
		return sent{xid: xid, commit: commit, time: t}
	}
	ka := func(lsn pglogrepl.LSN) sent { return sent{keepalive: lsn} }
	for _, tc := range []struct {
		name  string
		want  connector.CheckpointTxn
		slot  pglogrepl.LSN
		start pglogrepl.LSN
		sent  []sent
		// differs: "" the same history, else a word of what differs;
		// undecided: the messages do not decide.
		differs   string
		undecided bool
	}{
		{"crash after the checkpoint: the same transaction, then past the checkpoint", x, 0x100, 0x400,
			[]sent{ka(0x100), txn(900, 0x400, at), txn(901, 0x520, at.Add(time.Second))}, "", false},
		{"the same transaction, then a keepalive at the checkpoint", x, 0x100, 0x400,
			[]sent{txn(900, 0x400, at), ka(0x500)}, "", false},
		{"the same transaction ending at the checkpoint decides at once", connector.CheckpointTxn{Xid: 900, CommitLSN: 0x4D0, EndLSN: 0x500, CommitTime: at}, 0x100, 0x4D0,
			[]sent{txn(900, 0x4D0, at)}, "", false},
		{"restored before the transaction: the same xid reused by another one", x, 0x100, 0x400,
			[]sent{txn(900, 0x400, at.Add(time.Hour))}, "in its place the slot sends xid 900", false},
		{"restored before the transaction: another xid at its position", x, 0x100, 0x400,
			[]sent{txn(77, 0x400, at)}, "in its place the slot sends xid 77", false},
		{"restored before the transaction: something later in its place", x, 0x100, 0x400,
			[]sent{txn(901, 0x410, at)}, "in its place", false},
		{"restored before the transaction: the slot passes its end without it", x, 0x100, 0x400,
			[]sent{ka(0x3F0), ka(0x430)}, "passed 0/430 without it", false},
		{"restored after the transaction, written to before the checkpoint", x, 0x100, 0x400,
			[]sent{txn(900, 0x400, at), txn(950, 0x480, at.Add(time.Hour))}, "between the end of the last transaction the relay received", false},
		{"the slot past the transaction: nothing may come before the checkpoint", x, 0x440, 0x440,
			[]sent{txn(950, 0x480, at)}, "where the relay received no transaction", false},
		{"the slot past the transaction, and nothing before the checkpoint", x, 0x440, 0x440,
			[]sent{ka(0x440), ka(0x600)}, "", false},
		{"no transaction since a position: one comes before the checkpoint", none, 0x300, 0x300,
			[]sent{txn(5, 0x310, at)}, "between 0/300, where the relay began reading the slot, and the checkpoint 0/500", false},
		{"no transaction since a position: none comes", none, 0x300, 0x300,
			[]sent{ka(0x350), txn(5, 0x500, at)}, "", false},
		{"still decoding towards the transaction", x, 0x100, 0x400,
			[]sent{ka(0x100), ka(0x3FF)}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistoryCheck(tc.want, 0x500, tc.slot)
			if got := h.start(); got != tc.start {
				t.Fatalf("start = %s, want %s", got, tc.start)
			}
			done, differs := false, ""
			for i, m := range tc.sent {
				if done {
					t.Fatalf("decided before message %d", i)
				}
				if m.keepalive != 0 {
					done, differs = h.keepalive(m.keepalive)
				} else {
					done, differs = h.begin(m.xid, m.commit, m.time)
				}
			}
			switch {
			case tc.undecided:
				if done {
					t.Fatalf("decided (%q); want no verdict yet", differs)
				}
			case !done:
				t.Fatal("no verdict")
			case tc.differs == "" && differs != "":
				t.Fatalf("differs: %s; want the same history", differs)
			case tc.differs != "" && !strings.Contains(differs, tc.differs):
				t.Fatalf("differs = %q; want it to say %q", differs, tc.differs)
			}
		})
	}
}
