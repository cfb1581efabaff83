package cdc

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// positions is the one record of where a CDC source stands, from the
// stream to the slot: the rest of the package asks it rather than keep a
// copy. Normally reported ≤ saved ≤ acked ≤ emitted:
//
//   - emitted: the end of the last transaction handed to the runner on the
//     current stream; once acked reaches it, nothing is in flight;
//   - acked: what Kafka has acknowledged along with everything before it,
//     or a keepalive position reached while nothing was in flight. It
//     outlives a connection, so a reconnect starts from it;
//   - saved: the part of acked that a checkpoint holds. The slot is
//     confirmed up to it and no further;
//   - reported: what the current stream last confirmed to the server;
//   - start: where the current stream began, before which Kafka has every
//     transaction already.
//
// Beside them it keeps what a checkpoint is built from: the last
// transaction with events Kafka acknowledged (its commit time and last
// event id), the last transaction the slot sent whose end Kafka has
// (lastTxn, the proof of the history, history.go), the transaction
// snapshots of the database (txnsnapshot.go), the checkpoint saved or
// loaded and the one being saved, and the event counts.
//
// Its methods are the decisions about positions: what the slot may be
// told, what a checkpoint may hold, when one is due. They do no I/O and
// read no clock (the time is theirs to be given), so they are tested alone
// (position_test.go); [position] guards one for the goroutines that share
// it.
type positions struct {
	emitted, acked, saved, reported, start pglogrepl.LSN

	// lastAcked is the last transaction with events that Kafka
	// acknowledged (or a mark that carried one's commit time and id).
	lastAcked *ackedTxn
	// lastTxn is the last transaction received from the slot whose end
	// Kafka has, with everything before it; nil: none known.
	lastTxn *connector.CheckpointTxn
	// current is the checkpoint saved or loaded; nil: none.
	current *connector.Checkpoint
	// saving is the checkpoint the store is saving (saver); nil: none.
	saving *connector.Checkpoint
	// txnSnap is the transaction snapshot the checkpoints carry, whose
	// every transaction Kafka has; snapWaiting, when not nil, the one
	// taken since, which a checkpoint carries once it reaches its LSN
	// (txnsnapshot.go).
	txnSnap     connector.TxnSnapshot
	snapWaiting *connector.TxnSnapshot
	// events counts the events Kafka acknowledged for this process;
	// eventsBase the events the checkpoint counted before. handed counts
	// the events handed on, up to the last complete transaction handed on
	// or held (coalesce.go), as a checkpoint committed with a batch counts
	// them; savedEvents is events when the saver last looked.
	events, eventsBase, handed, savedEvents int64
	// snapshotPending: the rows of cdc.snapshot initial (or a backfill)
	// are not all in Kafka yet, and the checkpoint holds at the slot's
	// consistent point.
	snapshotPending bool
	// lastSave is when the store last saved a checkpoint; lastMark when a
	// checkpoint last went with a batch or a held transaction, which
	// counts from when that transaction began to arrive (exactly once,
	// txn.go).
	lastSave, lastMark time.Time
}

// ackedTxn is a transaction with events that Kafka acknowledged, or a
// mark at a position that carries the last one's commit time and id.
type ackedTxn struct {
	end    pglogrepl.LSN
	commit time.Time
	lastID string
	// proof names the transaction in the server's history (history.go);
	// nil for a mark at a position.
	proof *connector.CheckpointTxn
}

// advance raises acked to lsn; it never lowers it.
func (p *positions) advance(lsn pglogrepl.LSN) { p.acked = max(p.acked, lsn) }

// noteTxn raises lastTxn to t, never lowering it: a transaction the server
// sends again from before the checkpoint does not undo the proof beyond it.
func (p *positions) noteTxn(t *connector.CheckpointTxn) {
	if t == nil || t.EndLSN == 0 {
		return
	}
	if p.lastTxn == nil || p.lastTxn.EndLSN < t.EndLSN {
		p.lastTxn = t
	}
}

// loadTxn takes the proof of a checkpoint read from the store.
func (p *positions) loadTxn(cp connector.Checkpoint) {
	p.lastTxn = nil
	if t := cp.LastTxn; t.Known() {
		p.lastTxn = &t
	}
}

// ack records that Kafka acknowledged a batch that ends after txn, with n
// events; remember: txn's commit time and id are the ones a checkpoint
// names from now on.
func (p *positions) ack(txn *ackedTxn, n int64, remember bool) {
	if remember {
		p.lastAcked = txn
	}
	p.events += n
	p.noteTxn(txn.proof)
	p.advance(txn.end)
}

// committed records a checkpoint at end that the sink committed in a Kafka
// transaction (cp: the one it built; nil: none new).
func (p *positions) committed(end pglogrepl.LSN, cp *connector.Checkpoint) {
	p.saved = max(p.saved, end)
	if cp != nil {
		p.current = cp
		p.carried(*cp)
	}
}

// snapshotAt is the transaction snapshot a checkpoint at lsn carries: the
// one waiting once lsn has reached it (and no snapshot of the table is
// under way, whose rows Kafka may not have yet), else the one carried so
// far, if lsn is past it.
func (p positions) snapshotAt(lsn pglogrepl.LSN) connector.TxnSnapshot {
	if w := p.snapWaiting; w != nil && pglogrepl.LSN(w.LSN) <= lsn && !p.snapshotPending {
		return *w
	}
	if p.txnSnap.Known() && pglogrepl.LSN(p.txnSnap.LSN) <= lsn {
		return p.txnSnap
	}
	return connector.TxnSnapshot{}
}

// carried records the transaction snapshot a stored or committed
// checkpoint carries; the one waiting is done with once the checkpoint
// carries it.
func (p *positions) carried(cp connector.Checkpoint) {
	if cp.TxnSnapshot.Known() {
		p.txnSnap = cp.TxnSnapshot
	}
	if w := p.snapWaiting; w != nil && cp.TxnSnapshot == *w {
		p.snapWaiting = nil
	}
}

// snapshotTaken records a transaction snapshot just taken, to wait for a
// checkpoint past it, and reports whether it did: only one waits at a
// time, so that a checkpoint that lags never waits for the newest.
func (p *positions) snapshotTaken(snap connector.TxnSnapshot) bool {
	if p.snapWaiting != nil {
		return false
	}
	p.snapWaiting = &snap
	return true
}

// idle reports whether nothing handed on is still waiting for Kafka.
func (p positions) idle() bool { return p.acked >= p.emitted }

// pass moves the position past end, with nothing of the outbox in flight
// and nothing of it up to end (a keepalive's server position, or a
// transaction without events, proof), and reports whether it could:
// only when nothing handed on still waits for Kafka.
func (p *positions) pass(end pglogrepl.LSN, proof *connector.CheckpointTxn) bool {
	if !p.idle() {
		return false
	}
	p.noteTxn(proof)
	p.advance(end)
	p.emitted = max(p.emitted, end)
	return true
}

// resume sets the position a new session starts from, given where the
// slot is, and returns it. A fresh slot (created, or recreated after a
// loss) starts the record over at its position; otherwise what Kafka has
// is kept: starting at our own acknowledged position skips what Kafka
// already has, after a reconnect and after a start with a slot behind the
// checkpoint. The server starts at the slot's confirmed position when
// that is later (and at 0/0 means exactly that).
func (p *positions) resume(slot slotPosition) pglogrepl.LSN {
	if slot.fresh {
		p.acked, p.saved = slot.lsn, 0
		// The relay reads everything the slot sends from here.
		p.lastTxn = nil
		p.noteTxn(&connector.CheckpointTxn{EndLSN: uint64(slot.lsn)})
	} else {
		p.advance(slot.lsn)
		if p.lastTxn == nil {
			// A checkpoint without last_txn (version 1), or none: what the
			// relay reads from here on proves the history.
			p.noteTxn(&connector.CheckpointTxn{EndLSN: uint64(p.acked)})
		}
	}
	return p.acked
}

// startStream starts the record of a new stream from start, at now:
// nothing in flight, nothing reported on it yet, nothing marked or saved
// by it yet.
func (p *positions) startStream(start pglogrepl.LSN, now time.Time) {
	p.emitted, p.reported, p.start = start, 0, start
	p.lastMark = now
	p.savedEvents = p.events
	p.startHanding()
}

// startHanding starts the count of events handed on again from what Kafka
// acknowledged: what a stopped session handed on and Kafka did not
// acknowledge is handed on again.
func (p *positions) startHanding() { p.handed = p.events }

// handOn counts n events more handed on and returns the count.
func (p *positions) handOn(n int64) int64 {
	p.handed += n
	return p.handed
}

// skips reports whether a transaction that commits at final is in Kafka
// already: it commits before where the stream began. The server skips
// those itself; the check costs one comparison a transaction.
func (p positions) skips(final pglogrepl.LSN) bool { return final < p.start }

// emit records the transaction with n events, ending at end, whose first
// change arrived at began, as handed on (a held one counts: nothing passes
// it, and it goes to the runner before anything waits for it), and
// returns the events handed on with it.
func (p *positions) emit(end pglogrepl.LSN, n int64, began time.Time) int64 {
	p.emitted = end
	p.lastMark = began
	return p.handOn(n)
}

// load takes the checkpoint read from the store at start; own: it is this
// relay's (its key), so the slot may be confirmed up to it.
func (p *positions) load(cp connector.Checkpoint, own bool) {
	p.current = &cp
	if own {
		p.eventsBase = cp.Events
		p.advance(pglogrepl.LSN(cp.EndLSN))
		p.saved = pglogrepl.LSN(cp.EndLSN)
		p.loadTxn(cp)
		p.txnSnap = cp.TxnSnapshot
	}
}

// takeOver takes the checkpoint another session left under key, when it
// is later than the one known, and reports whether it did.
func (p *positions) takeOver(cp connector.Checkpoint, key connector.CheckpointKey) bool {
	if cp.Key != key || (p.current != nil && p.current.Key == cp.Key && cp.EndLSN <= p.current.EndLSN) {
		return false
	}
	p.current = &cp
	p.eventsBase = cp.Events - p.events
	p.loadTxn(cp)
	p.txnSnap, p.snapWaiting = cp.TxnSnapshot, nil
	p.advance(pglogrepl.LSN(cp.EndLSN))
	p.saved = max(p.saved, pglogrepl.LSN(cp.EndLSN))
	return true
}

// report is what the slot may be told now: the position the last
// checkpoint holds, never what Kafka has but no checkpoint does. ok is
// false while there is none.
func (p positions) report() (lsn pglogrepl.LSN, ok bool) { return p.saved, p.saved != 0 }

// confirmDue reports whether a checkpoint holds a position the stream has
// not confirmed to the slot yet.
func (p positions) confirmDue() bool { return p.saved != p.reported }

// unconfirmed reports whether something handed on is not confirmed to the
// slot yet, so the stream wakes to confirm it.
func (p positions) unconfirmed() bool { return p.emitted > p.reported }

// checkpointAt is the position a checkpoint may hold now: what Kafka
// acknowledged, or the end of the last transaction it has when that is
// later.
func (p positions) checkpointAt() pglogrepl.LSN {
	lsn := p.acked
	if p.lastTxn != nil && pglogrepl.LSN(p.lastTxn.EndLSN) > lsn {
		lsn = pglogrepl.LSN(p.lastTxn.EndLSN)
	}
	return lsn
}

// checkpointIdentity is what every checkpoint of a source says of itself.
type checkpointIdentity struct {
	key          connector.CheckpointKey
	timeline     int32
	relayVersion string
}

// toSave is the checkpoint the store may save now, written at now; ok is
// false when the last one says the same, or holds at the consistent
// point of a snapshot that is still under way.
func (p positions) toSave(id checkpointIdentity, now time.Time) (connector.Checkpoint, bool) {
	lsn := p.checkpointAt()
	own := p.current != nil && p.current.Key == id.key
	if own && p.current.SnapshotPending && p.snapshotPending {
		return connector.Checkpoint{}, false
	}
	if own && pglogrepl.LSN(p.current.EndLSN) == lsn && p.current.SnapshotPending == p.snapshotPending {
		return connector.Checkpoint{}, false
	}
	cp := connector.Checkpoint{
		Key:          id.key,
		EndLSN:       uint64(lsn),
		Timeline:     id.timeline,
		Events:       p.eventsBase + p.events,
		RelayVersion: id.relayVersion,
		Written:      now,

		SnapshotPending: p.snapshotPending,
	}
	if own {
		cp.CommitTime, cp.LastEventID = p.current.CommitTime, p.current.LastEventID
	}
	if t := p.lastAcked; t != nil {
		cp.CommitTime, cp.LastEventID = t.commit, t.lastID
	}
	if p.lastTxn != nil {
		cp.LastTxn = *p.lastTxn
	}
	cp.TxnSnapshot = p.snapshotAt(lsn)
	return cp, true
}

// stored records that the store saved cp at now.
func (p *positions) stored(cp connector.Checkpoint, now time.Time) {
	p.current = &cp
	p.saved = pglogrepl.LSN(cp.EndLSN)
	p.lastSave = now
	p.carried(cp)
}

// saveDue reports whether the store's saver should save now, when no save
// is in flight: events were acknowledged since it last looked, or the
// position moved only with the server's WAL (keepalives, other tables) and
// a status interval passed since the last save (the slot must follow it,
// so that the server can recycle WAL, but not five times a second on a
// busy server with an idle outbox), or a snapshot the checkpoint says is
// pending is all in Kafka.
func (p positions) saveDue(now time.Time, statusInterval time.Duration) bool {
	if p.saving != nil {
		return false
	}
	snapshotDone := p.current != nil && p.current.SnapshotPending && !p.snapshotPending
	if snapshotDone {
		return true
	}
	if p.acked == p.saved {
		return false
	}
	return p.events != p.savedEvents || now.Sub(p.lastSave) >= statusInterval
}

// beginSave is the checkpoint the saver may start saving at now, which it
// records as in flight. ok is false while a save is in flight, when none
// is due (saveDue), and when the last checkpoint says the same (toSave).
func (p *positions) beginSave(id checkpointIdentity, now time.Time, statusInterval time.Duration) (cp connector.Checkpoint, ok bool) {
	if !p.saveDue(now, statusInterval) {
		return connector.Checkpoint{}, false
	}
	p.savedEvents = p.events
	if cp, ok = p.toSave(id, now); ok {
		p.saving = &cp
	}
	return cp, ok
}

// saveEnded records, at now, how the save in flight ended: the store has
// it (saved), or it failed.
func (p *positions) saveEnded(saved bool, now time.Time) {
	if saved && p.saving != nil {
		p.stored(*p.saving, now)
	}
	p.saving = nil
}

// checkpointWake reports whether the stream wakes at its checkpoint
// ticks, when nothing else wakes it: something handed on is not
// confirmed yet, Kafka acknowledged what no checkpoint holds (an earlier
// session's batches too), a save is in flight, or the checkpoint says a
// snapshot is pending, whose end needs a save of its own.
func (p positions) checkpointWake() bool {
	return p.unconfirmed() || p.acked != p.saved || p.saving != nil || (p.current != nil && p.current.SnapshotPending)
}

// markAt is a transaction-less mark at lsn: the last acknowledged
// transaction's commit time and event id (or the checkpoint's), the
// position lsn.
func (p positions) markAt(lsn pglogrepl.LSN) *ackedTxn {
	t := &ackedTxn{end: lsn, proof: p.lastTxn}
	if last := p.lastAcked; last != nil {
		t.commit, t.lastID = last.commit, last.lastID
	} else if p.current != nil {
		t.commit, t.lastID = p.current.CommitTime, p.current.LastEventID
	}
	return t
}

// mark is the checkpoint committed with a batch that ends after txn, when
// events events of this process have been handed on with it, written at
// now.
func (p positions) mark(id checkpointIdentity, txn *ackedTxn, events int64, pending bool, now time.Time) connector.Checkpoint {
	cp := connector.Checkpoint{
		Key:          id.key,
		EndLSN:       uint64(txn.end),
		CommitTime:   txn.commit,
		LastEventID:  txn.lastID,
		Timeline:     id.timeline,
		Events:       p.eventsBase + events,
		RelayVersion: id.relayVersion,
		Written:      now,

		SnapshotPending: pending,
	}
	if txn.proof != nil && txn.proof.EndLSN <= uint64(txn.end) {
		cp.LastTxn = *txn.proof
	}
	if !pending {
		cp.TxnSnapshot = p.snapshotAt(txn.end)
	}
	return cp
}

// idleMarkDue reports whether a position the server's keepalives reached
// while nothing was in flight should go into a checkpoint committed in a
// Kafka transaction at now: it is past the saved one, no snapshot is under
// way (its checkpoint holds at the consistent point), and the last
// checkpoint that went with a batch is a status interval old: the slot
// must follow the server's WAL, but need not at every keepalive.
func (p positions) idleMarkDue(now time.Time, statusInterval time.Duration) bool {
	return now.Sub(p.lastMark) >= statusInterval && p.emitted > p.saved && !p.snapshotPending
}

// idleMark is the mark at the position keepalives reached while idle, made
// at now, and the events handed on before it.
func (p *positions) idleMark(now time.Time) (*ackedTxn, int64) {
	p.lastMark = now
	return p.markAt(p.emitted), p.handed
}

// position guards a source's positions. Kafka's callbacks record in it
// what the sink's client acknowledged and what the checkpoint store's
// client saved; Run's goroutine, the stream on it, reads and moves it; the
// cleanup goroutine, scrapes and probes read it.
type position struct {
	mu sync.Mutex
	p  positions
}

// get returns a copy of the record.
func (x *position) get() positions {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.p
}

// update applies f to the record, alone.
func (x *position) update(f func(p *positions)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f(&x.p)
}
