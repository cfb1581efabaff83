package cdc

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

var (
	testKey   = connector.CheckpointKey{SystemID: "7300000000000000001", Slot: "outbox"}
	testID    = checkpointIdentity{key: testKey, timeline: 1, relayVersion: "test"}
	testNow   = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	testTxn   = &connector.CheckpointTxn{Xid: 42, CommitLSN: 0x1f0, EndLSN: 0x200, CommitTime: testNow.Add(-time.Minute)}
	testAcked = &ackedTxn{end: 0x200, commit: testNow.Add(-time.Minute), lastID: "e-9", proof: testTxn}
)

// TestPositionsReport: the slot is told only what a checkpoint holds,
// never what Kafka has and no checkpoint does.
func TestPositionsReport(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		p                        positions
		want                     pglogrepl.LSN
		ok, confirm, unconfirmed bool
	}{
		{name: "nothing saved yet", p: positions{emitted: 0x300, acked: 0x300}, unconfirmed: true},
		{name: "acked ahead of the checkpoint", p: positions{emitted: 0x300, acked: 0x300, saved: 0x200, reported: 0x200},
			want: 0x200, ok: true, unconfirmed: true},
		{name: "checkpoint not yet confirmed", p: positions{emitted: 0x300, acked: 0x300, saved: 0x300, reported: 0x200},
			want: 0x300, ok: true, confirm: true, unconfirmed: true},
		{name: "all confirmed", p: positions{emitted: 0x300, acked: 0x300, saved: 0x300, reported: 0x300}, want: 0x300, ok: true},
		{name: "new stream, nothing reported on it", p: positions{emitted: 0x300, acked: 0x300, saved: 0x300},
			want: 0x300, ok: true, confirm: true, unconfirmed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lsn, ok := tc.p.report()
			if lsn != tc.want || ok != tc.ok {
				t.Errorf("report() = %s, %v; want %s, %v", lsn, ok, tc.want, tc.ok)
			}
			if got := tc.p.confirmDue(); got != tc.confirm {
				t.Errorf("confirmDue() = %v, want %v", got, tc.confirm)
			}
			if got := tc.p.unconfirmed(); got != tc.unconfirmed {
				t.Errorf("unconfirmed() = %v, want %v", got, tc.unconfirmed)
			}
		})
	}
}

// TestPositionsMoves: how acknowledgements, keepalives, loads and
// reconnects move the record.
func TestPositionsMoves(t *testing.T) {
	own := connector.Checkpoint{Key: testKey, EndLSN: 0x200, Events: 10, LastTxn: *testTxn}
	for _, tc := range []struct {
		name  string
		start positions
		do    func(p *positions) bool
		want  positions
		ret   bool
	}{
		{
			name:  "ack raises acked, counts, remembers",
			start: positions{emitted: 0x200, acked: 0x100, events: 3},
			do:    func(p *positions) bool { p.ack(testAcked, 2, true); return false },
			want:  positions{emitted: 0x200, acked: 0x200, events: 5, lastAcked: testAcked, lastTxn: testTxn},
		},
		{
			name:  "a late ack never lowers acked or the proof",
			start: positions{acked: 0x300, lastTxn: &connector.CheckpointTxn{EndLSN: 0x300}},
			do:    func(p *positions) bool { p.ack(testAcked, 1, false); return false },
			want:  positions{acked: 0x300, lastTxn: &connector.CheckpointTxn{EndLSN: 0x300}, events: 1},
		},
		{
			name:  "committed in a Kafka transaction raises saved",
			start: positions{acked: 0x200, saved: 0x100},
			do:    func(p *positions) bool { p.committed(0x200, &own); return false },
			want:  positions{acked: 0x200, saved: 0x200, current: &own},
		},
		{
			name:  "committed never lowers saved",
			start: positions{saved: 0x300},
			do:    func(p *positions) bool { p.committed(0x200, nil); return false },
			want:  positions{saved: 0x300},
		},
		{
			name:  "keepalive while idle moves acked and emitted",
			start: positions{emitted: 0x200, acked: 0x200},
			do:    func(p *positions) bool { return p.pass(0x500, nil) },
			want:  positions{emitted: 0x500, acked: 0x500},
			ret:   true,
		},
		{
			name:  "keepalive with events in flight moves nothing",
			start: positions{emitted: 0x300, acked: 0x200},
			do:    func(p *positions) bool { return p.pass(0x500, nil) },
			want:  positions{emitted: 0x300, acked: 0x200},
		},
		{
			name:  "an empty transaction while idle is its own proof",
			start: positions{emitted: 0x100, acked: 0x100},
			do:    func(p *positions) bool { return p.pass(0x200, testTxn) },
			want:  positions{emitted: 0x200, acked: 0x200, lastTxn: testTxn},
			ret:   true,
		},
		{
			name:  "resume on a fresh slot starts over",
			start: positions{acked: 0x900, saved: 0x900, lastTxn: testTxn},
			do:    func(p *positions) bool { p.resume(slotPosition{lsn: 0x100, fresh: true}); return false },
			want:  positions{acked: 0x100, lastTxn: &connector.CheckpointTxn{EndLSN: 0x100}},
		},
		{
			name:  "resume keeps what Kafka has when the slot is behind",
			start: positions{acked: 0x200, saved: 0x200, lastTxn: testTxn},
			do:    func(p *positions) bool { p.resume(slotPosition{lsn: 0x100}); return false },
			want:  positions{acked: 0x200, saved: 0x200, lastTxn: testTxn},
		},
		{
			name:  "resume without a proof proves from the position",
			start: positions{acked: 0x200, saved: 0x200},
			do:    func(p *positions) bool { p.resume(slotPosition{lsn: 0x300}); return false },
			want:  positions{acked: 0x300, saved: 0x200, lastTxn: &connector.CheckpointTxn{EndLSN: 0x300}},
		},
		{
			name:  "load of our own checkpoint",
			start: positions{},
			do:    func(p *positions) bool { p.load(own, true); return false },
			want:  positions{acked: 0x200, saved: 0x200, eventsBase: 10, lastTxn: testTxn, current: &own},
		},
		{
			name:  "load of another key's checkpoint only knows it",
			start: positions{},
			do:    func(p *positions) bool { p.load(own, false); return false },
			want:  positions{current: &own},
		},
		{
			name:  "take over a later checkpoint another session left",
			start: positions{acked: 0x100, saved: 0x100, events: 4, current: &connector.Checkpoint{Key: testKey, EndLSN: 0x100}},
			do:    func(p *positions) bool { return p.takeOver(own, testKey) },
			want:  positions{acked: 0x200, saved: 0x200, events: 4, eventsBase: 6, lastTxn: testTxn, current: &own},
			ret:   true,
		},
		{
			name:  "an earlier checkpoint is not taken over",
			start: positions{acked: 0x300, saved: 0x300, current: &connector.Checkpoint{Key: testKey, EndLSN: 0x300}},
			do:    func(p *positions) bool { return p.takeOver(own, testKey) },
			want:  positions{acked: 0x300, saved: 0x300, current: &connector.Checkpoint{Key: testKey, EndLSN: 0x300}},
		},
		{
			name:  "another key's checkpoint is not taken over",
			start: positions{acked: 0x100},
			do: func(p *positions) bool {
				return p.takeOver(own, connector.CheckpointKey{SystemID: "other", Slot: "outbox"})
			},
			want: positions{acked: 0x100},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.start
			if ret := tc.do(&p); ret != tc.ret {
				t.Errorf("returned %v, want %v", ret, tc.ret)
			}
			assertPositions(t, p, tc.want)
		})
	}
}

func assertPositions(t *testing.T, got, want positions) {
	t.Helper()
	if got.emitted != want.emitted || got.acked != want.acked || got.saved != want.saved || got.reported != want.reported {
		t.Errorf("emitted/acked/saved/reported = %s/%s/%s/%s, want %s/%s/%s/%s",
			got.emitted, got.acked, got.saved, got.reported, want.emitted, want.acked, want.saved, want.reported)
	}
	if got.events != want.events || got.eventsBase != want.eventsBase {
		t.Errorf("events/eventsBase = %d/%d, want %d/%d", got.events, got.eventsBase, want.events, want.eventsBase)
	}
	if (got.lastTxn == nil) != (want.lastTxn == nil) || got.lastTxn != nil && *got.lastTxn != *want.lastTxn {
		t.Errorf("lastTxn = %+v, want %+v", got.lastTxn, want.lastTxn)
	}
	if got.lastAcked != want.lastAcked {
		t.Errorf("lastAcked = %+v, want %+v", got.lastAcked, want.lastAcked)
	}
	if (got.current == nil) != (want.current == nil) || got.current != nil && *got.current != *want.current {
		t.Errorf("current = %+v, want %+v", got.current, want.current)
	}
}

// TestPositionsToSave: what the store may save as the checkpoint now.
func TestPositionsToSave(t *testing.T) {
	prev := connector.Checkpoint{Key: testKey, EndLSN: 0x100, CommitTime: testNow.Add(-time.Hour), LastEventID: "e-1"}
	pending := prev
	pending.SnapshotPending = true
	for _, tc := range []struct {
		name string
		p    positions
		want connector.Checkpoint
		ok   bool
	}{
		{
			name: "first checkpoint, nothing acknowledged",
			p:    positions{acked: 0x100, lastTxn: &connector.CheckpointTxn{EndLSN: 0x100}},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x100, Timeline: 1, RelayVersion: "test", Written: testNow,
				LastTxn: connector.CheckpointTxn{EndLSN: 0x100}},
			ok: true,
		},
		{
			name: "acknowledged transaction names its commit and last event",
			p:    positions{acked: 0x200, saved: 0x100, events: 5, eventsBase: 10, lastAcked: testAcked, lastTxn: testTxn, current: &prev},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x200, Timeline: 1, Events: 15, RelayVersion: "test", Written: testNow,
				CommitTime: testAcked.commit, LastEventID: "e-9", LastTxn: *testTxn},
			ok: true,
		},
		{
			name: "keepalive position keeps the checkpoint's commit and event",
			p:    positions{acked: 0x400, saved: 0x100, lastTxn: testTxn, current: &prev},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x400, Timeline: 1, RelayVersion: "test", Written: testNow,
				CommitTime: prev.CommitTime, LastEventID: "e-1", LastTxn: *testTxn},
			ok: true,
		},
		{
			name: "proof past acked: its end",
			p:    positions{acked: 0x100, lastTxn: testTxn, current: &prev},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x200, Timeline: 1, RelayVersion: "test", Written: testNow,
				CommitTime: prev.CommitTime, LastEventID: "e-1", LastTxn: *testTxn},
			ok: true,
		},
		{
			name: "another key's checkpoint lends nothing",
			p:    positions{acked: 0x100, current: &connector.Checkpoint{Key: connector.CheckpointKey{SystemID: "x"}, CommitTime: testNow}},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x100, Timeline: 1, RelayVersion: "test", Written: testNow},
			ok:   true,
		},
		{name: "unchanged", p: positions{acked: 0x100, saved: 0x100, current: &prev}},
		{name: "held at the consistent point while the snapshot runs", p: positions{acked: 0x300, snapshotPending: true, current: &pending}},
		{
			name: "snapshot starts: pending is saved",
			p:    positions{acked: 0x100, saved: 0x100, snapshotPending: true, current: &prev},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x100, Timeline: 1, RelayVersion: "test", Written: testNow,
				CommitTime: prev.CommitTime, LastEventID: "e-1", SnapshotPending: true},
			ok: true,
		},
		{
			name: "snapshot done: saved though the position did not move",
			p:    positions{acked: 0x100, saved: 0x100, current: &pending},
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x100, Timeline: 1, RelayVersion: "test", Written: testNow,
				CommitTime: prev.CommitTime, LastEventID: "e-1"},
			ok: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.p.toSave(testID, testNow)
			if ok != tc.ok || got != tc.want {
				t.Errorf("toSave() =\n  %+v, %v\nwant\n  %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestPositionsSaveDue: when the store's saver saves.
func TestPositionsSaveDue(t *testing.T) {
	interval := time.Second
	pending := &connector.Checkpoint{Key: testKey, SnapshotPending: true}
	for _, tc := range []struct {
		name string
		p    positions
		want bool
	}{
		{name: "nothing moved", p: positions{acked: 0x100, saved: 0x100, events: 3, savedEvents: 3}},
		{name: "events acknowledged", p: positions{acked: 0x200, saved: 0x100, events: 4, savedEvents: 3, lastSave: testNow}, want: true},
		{name: "only the WAL moved, within a status interval", p: positions{acked: 0x200, saved: 0x100, events: 3, savedEvents: 3, lastSave: testNow.Add(-interval / 2)}},
		{name: "only the WAL moved, a status interval on", p: positions{acked: 0x200, saved: 0x100, events: 3, savedEvents: 3, lastSave: testNow.Add(-interval)}, want: true},
		{name: "snapshot all in Kafka", p: positions{acked: 0x100, saved: 0x100, current: pending}, want: true},
		{name: "snapshot still running", p: positions{acked: 0x100, saved: 0x100, current: pending, snapshotPending: true}},
		{name: "a save in flight", p: positions{acked: 0x200, saved: 0x100, events: 4, savedEvents: 3, saving: &connector.Checkpoint{EndLSN: 0x180}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.saveDue(testNow, interval); got != tc.want {
				t.Errorf("saveDue() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPositionsSave: a save begins only when one is due and says
// something new, one at a time, and only its success moves saved; the
// stream wakes for it while it is in flight.
func TestPositionsSave(t *testing.T) {
	interval := time.Second
	p := positions{emitted: 0x200, acked: 0x200, saved: 0x100, reported: 0x100, events: 4, savedEvents: 3, lastTxn: testTxn, lastAcked: testAcked}
	cp, ok := p.beginSave(testID, testNow, interval)
	if !ok || cp.EndLSN != 0x200 || p.saving == nil || *p.saving != cp || p.savedEvents != 4 {
		t.Fatalf("beginSave() = %+v, %v; saving %+v, savedEvents %d; want a save at 0/200 in flight, savedEvents 4", cp, ok, p.saving, p.savedEvents)
	}
	if _, again := p.beginSave(testID, testNow, interval); again {
		t.Errorf("a second save began while one was in flight")
	}
	if !p.checkpointWake() {
		t.Errorf("checkpointWake() = false with a save in flight")
	}
	if p.saved != 0x100 {
		t.Errorf("saved = %s before the store answered, want 0/100", p.saved)
	}

	failed := p
	failed.saveEnded(false, testNow)
	if failed.saving != nil || failed.saved != 0x100 || failed.current != nil {
		t.Errorf("after a failed save: saving %+v, saved %s, current %+v; want none, 0/100, none", failed.saving, failed.saved, failed.current)
	}

	p.saveEnded(true, testNow.Add(time.Millisecond))
	if p.saving != nil || p.saved != 0x200 || p.current == nil || *p.current != cp || !p.lastSave.Equal(testNow.Add(time.Millisecond)) {
		t.Errorf("after the save: saving %+v, saved %s, current %+v, lastSave %s; want none, 0/200, the checkpoint saved, its end", p.saving, p.saved, p.current, p.lastSave)
	}
	if !p.confirmDue() {
		t.Errorf("confirmDue() = false after a save the slot has not been told of")
	}
	if _, again := p.beginSave(testID, testNow.Add(2*time.Millisecond), interval); again {
		t.Errorf("a save began with nothing new acknowledged")
	}
}

// TestPositionsCheckpointWake: the stream wakes at its checkpoint ticks
// while there is something to confirm or save, and sleeps through them
// when there is none.
func TestPositionsCheckpointWake(t *testing.T) {
	pending := &connector.Checkpoint{Key: testKey, SnapshotPending: true}
	for _, tc := range []struct {
		name string
		p    positions
		want bool
	}{
		{name: "all confirmed", p: positions{emitted: 0x200, acked: 0x200, saved: 0x200, reported: 0x200}},
		{name: "in flight", p: positions{emitted: 0x300, acked: 0x200, saved: 0x200, reported: 0x200}, want: true},
		{name: "saved, not confirmed", p: positions{emitted: 0x200, acked: 0x200, saved: 0x200, reported: 0x100}, want: true},
		{name: "an earlier session's batch acknowledged late", p: positions{emitted: 0x200, acked: 0x300, saved: 0x200, reported: 0x200}, want: true},
		{name: "a save in flight", p: positions{emitted: 0x200, acked: 0x200, saved: 0x200, reported: 0x200, saving: &connector.Checkpoint{}}, want: true},
		{name: "a snapshot whose end needs a save", p: positions{emitted: 0x200, acked: 0x200, saved: 0x200, reported: 0x200, current: pending}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.checkpointWake(); got != tc.want {
				t.Errorf("checkpointWake() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPositionsStream: a stream's start, what it skips, and what it
// counts as handed on.
func TestPositionsStream(t *testing.T) {
	p := positions{emitted: 0x900, acked: 0x400, saved: 0x300, reported: 0x300, events: 7, handed: 12, savedEvents: 2}
	p.startStream(0x400, testNow)
	if p.emitted != 0x400 || p.reported != 0 || p.start != 0x400 || p.handed != 7 || p.savedEvents != 7 || !p.lastMark.Equal(testNow) {
		t.Fatalf("after startStream: %+v", p)
	}
	if !p.skips(0x3ff) || p.skips(0x400) {
		t.Errorf("skips(0/3FF), skips(0/400) = %v, %v; want true, false", p.skips(0x3ff), p.skips(0x400))
	}
	if got := p.emit(0x500, 3, testNow.Add(time.Second)); got != 10 || p.emitted != 0x500 || !p.lastMark.Equal(testNow.Add(time.Second)) {
		t.Errorf("emit() = %d, emitted %s, lastMark %s; want 10, 0/500, a second on", got, p.emitted, p.lastMark)
	}
	if p.idle() {
		t.Errorf("idle() with a transaction in flight")
	}
	if got := p.handOn(2); got != 12 {
		t.Errorf("handOn(2) = %d, want 12", got)
	}
}

// TestPositionsMark: the checkpoint committed with a batch in a Kafka
// transaction, and the mark at a position with nothing of its own.
func TestPositionsMark(t *testing.T) {
	prev := &connector.Checkpoint{Key: testKey, EndLSN: 0x100, CommitTime: testNow.Add(-time.Hour), LastEventID: "e-1"}
	for _, tc := range []struct {
		name    string
		p       positions
		txn     *ackedTxn // nil: markAt(at)
		at      pglogrepl.LSN
		events  int64
		pending bool
		want    connector.Checkpoint
	}{
		{
			name: "transaction", p: positions{eventsBase: 10}, txn: testAcked, events: 5,
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x200, CommitTime: testAcked.commit, LastEventID: "e-9", Timeline: 1,
				Events: 15, RelayVersion: "test", Written: testNow, LastTxn: *testTxn},
		},
		{
			name: "mark after an acknowledged transaction", p: positions{lastAcked: testAcked, lastTxn: testTxn, current: prev}, at: 0x500,
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x500, CommitTime: testAcked.commit, LastEventID: "e-9", Timeline: 1,
				RelayVersion: "test", Written: testNow, LastTxn: *testTxn},
		},
		{
			name: "mark from the checkpoint, snapshot pending", p: positions{current: prev}, at: 0x100, pending: true,
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x100, CommitTime: prev.CommitTime, LastEventID: "e-1", Timeline: 1,
				RelayVersion: "test", Written: testNow, SnapshotPending: true},
		},
		{
			name: "a proof past the mark is left out", p: positions{lastTxn: testTxn}, at: 0x100,
			want: connector.Checkpoint{Key: testKey, EndLSN: 0x100, Timeline: 1, RelayVersion: "test", Written: testNow},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			txn := tc.txn
			if txn == nil {
				txn = tc.p.markAt(tc.at)
			}
			if got := tc.p.mark(testID, txn, tc.events, tc.pending, testNow); got != tc.want {
				t.Errorf("mark() =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// TestPositionsIdleMarkDue: in Kafka transactions, a position reached
// while idle goes into a checkpoint once a status interval, unless a
// snapshot holds it back.
func TestPositionsIdleMarkDue(t *testing.T) {
	interval := time.Second
	long := testNow.Add(-interval)
	for _, tc := range []struct {
		name string
		p    positions
		want bool
	}{
		{name: "moved past the checkpoint", p: positions{emitted: 0x200, saved: 0x100, lastMark: long}, want: true},
		{name: "at the checkpoint", p: positions{emitted: 0x100, saved: 0x100, lastMark: long}},
		{name: "snapshot under way", p: positions{emitted: 0x200, saved: 0x100, snapshotPending: true, lastMark: long}},
		{name: "marked within a status interval", p: positions{emitted: 0x200, saved: 0x100, lastMark: testNow.Add(-interval / 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.idleMarkDue(testNow, interval); got != tc.want {
				t.Errorf("idleMarkDue() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPositionsIdleMark: the mark at the idle position counts the events
// handed on, and starts the status interval again.
func TestPositionsIdleMark(t *testing.T) {
	p := positions{emitted: 0x500, saved: 0x100, handed: 9, lastAcked: testAcked, lastTxn: testTxn, lastMark: testNow.Add(-time.Hour)}
	txn, handed := p.idleMark(testNow)
	if txn.end != 0x500 || txn.lastID != "e-9" || handed != 9 || !p.lastMark.Equal(testNow) {
		t.Errorf("idleMark() = %+v, %d, lastMark %s; want a mark at 0/500 naming e-9, 9, now", txn, handed, p.lastMark)
	}
}
