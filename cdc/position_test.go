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
		name        string
		p           positions
		savedEvents int64
		want        bool
	}{
		{name: "nothing moved", p: positions{acked: 0x100, saved: 0x100, events: 3}, savedEvents: 3},
		{name: "events acknowledged", p: positions{acked: 0x200, saved: 0x100, events: 4, lastSave: testNow}, savedEvents: 3, want: true},
		{name: "only the WAL moved, within a status interval", p: positions{acked: 0x200, saved: 0x100, events: 3, lastSave: testNow.Add(-interval / 2)}, savedEvents: 3},
		{name: "only the WAL moved, a status interval on", p: positions{acked: 0x200, saved: 0x100, events: 3, lastSave: testNow.Add(-interval)}, savedEvents: 3, want: true},
		{name: "snapshot all in Kafka", p: positions{acked: 0x100, saved: 0x100, current: pending}, want: true},
		{name: "snapshot still running", p: positions{acked: 0x100, saved: 0x100, current: pending, snapshotPending: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.saveDue(tc.savedEvents, testNow, interval); got != tc.want {
				t.Errorf("saveDue() = %v, want %v", got, tc.want)
			}
		})
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
// while idle goes into a checkpoint unless a snapshot holds it back.
func TestPositionsIdleMarkDue(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    positions
		want bool
	}{
		{name: "moved past the checkpoint", p: positions{emitted: 0x200, saved: 0x100}, want: true},
		{name: "at the checkpoint", p: positions{emitted: 0x100, saved: 0x100}},
		{name: "snapshot under way", p: positions{emitted: 0x200, saved: 0x100, snapshotPending: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.idleMarkDue(); got != tc.want {
				t.Errorf("idleMarkDue() = %v, want %v", got, tc.want)
			}
		})
	}
}
