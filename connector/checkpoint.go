package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CheckpointVersion is the version of the checkpoint value this build
// writes, and the newest it can read. Version 2 added last_txn, version 3
// txn_snapshot; an older record reads as one without them.
const CheckpointVersion = 3

// CheckpointKey names one relay: the PostgreSQL cluster (its
// system_identifier, from IDENTIFY_SYSTEM or pg_control_system()), the
// database and the replication slot. Two relays with the same key share a
// position; a checkpoint read under another key is someone else's.
type CheckpointKey struct {
	SystemID string
	Database string
	Slot     string
}

// String is the record key in the checkpoint topic: the three parts joined
// by "/", each escaped so that no part can forge another key.
func (k CheckpointKey) String() string {
	esc := func(s string) string {
		return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
	}
	return esc(k.SystemID) + "/" + esc(k.Database) + "/" + esc(k.Slot)
}

// ParseCheckpointKey reads a record key written by [CheckpointKey.String].
func ParseCheckpointKey(s string) (CheckpointKey, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return CheckpointKey{}, fmt.Errorf("checkpoint key %q: want system_identifier/database/slot", s)
	}
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return CheckpointKey{}, fmt.Errorf("checkpoint key %q: %w", s, err)
		}
		parts[i] = u
	}
	return CheckpointKey{SystemID: parts[0], Database: parts[1], Slot: parts[2]}, nil
}

// SameRelay reports whether k and o name the same database and slot, on
// whatever cluster: a checkpoint saved under such a key by another cluster
// is the trace of a relay moved to a new server, or another relay's whose
// names are the same (the defaults, say).
func (k CheckpointKey) SameRelay(o CheckpointKey) bool {
	return k.Database == o.Database && k.Slot == o.Slot
}

// Checkpoint is what the relay knows it has published: every event of
// every transaction that ended at or before EndLSN has been acknowledged
// by Kafka.
type Checkpoint struct {
	Key CheckpointKey
	// EndLSN is the end of the last fully acknowledged transaction.
	EndLSN uint64
	// CommitTime is that transaction's commit time.
	CommitTime time.Time
	// Timeline is the server's timeline when known, else 0.
	Timeline int32
	// LastEventID is the id of the last event acknowledged.
	LastEventID string
	// Events is the number of events published under this key so far.
	Events int64
	// RelayVersion is the version of the relay that wrote it.
	RelayVersion string
	// Written is when it was written.
	Written time.Time
	// SnapshotPending: the relay created the slot and began publishing
	// the rows already in the table (cdc.snapshot initial), and Kafka has
	// not yet acknowledged them all; a restart publishes them again.
	SnapshotPending bool
	// LastTxn is what proves, at the next start, that the server's
	// history up to EndLSN is the one the relay read; zero when not
	// known (a version 1 checkpoint).
	LastTxn CheckpointTxn
	// TxnSnapshot is a transaction snapshot of the database whose every
	// transaction Kafka has: what a backfill after a loss need not
	// publish again. Zero when none was taken (before version 3, a
	// standby, a relay just started).
	TxnSnapshot TxnSnapshot
}

// CheckpointTxn is the last transaction the relay received from the slot
// that ended at or before a checkpoint's EndLSN: the slot sent none
// between its end and EndLSN. On a server restored from a copy taken
// before EndLSN, whose WAL has since passed it, replaying the slot from
// CommitLSN shows another transaction there, or one between EndLSN and
// this one's end, and the relay knows that what it would skip is not
// what it relayed.
//
// Xid 0 says the relay received no transaction between EndLSN here and
// the checkpoint's: it began reading the slot there (a new slot, or the
// first start after a checkpoint without this field).
type CheckpointTxn struct {
	// Xid is the transaction's id as the slot sends it (32 bits, no
	// epoch): together with CommitLSN, which never repeats in one
	// history, and CommitTime it names one transaction.
	Xid uint32
	// CommitLSN is where its commit record begins; 0 with Xid 0.
	CommitLSN uint64
	// EndLSN is where its commit record ends; never 0 when known.
	EndLSN uint64
	// CommitTime is its commit time, to the microsecond.
	CommitTime time.Time
}

// Known reports whether t holds a proof at all.
func (t CheckpointTxn) Known() bool { return t.EndLSN != 0 }

// TxnSnapshot is what a transaction snapshot of the database
// (pg_current_snapshot()) proves once a checkpoint reaches LSN: every
// transaction whose id is below Xmin had ended when it was taken, so its
// commit record ends before LSN, the WAL position read after it, and Kafka
// has its events. A row whose xmin, widened to 64 bits, is below Xmin is
// in Kafka; one at or above it may not be. Xmin, not the in-progress list,
// is the bound because a row written in a subtransaction carries the
// subtransaction's id, which that list leaves out.
//
// The proof holds on the server's history up to LSN: on the timeline it
// was taken on, or a later one that branched off after LSN (a promoted
// standby, a point-in-time recovery), and only while the same server
// process runs (ServerStart), since a server restored from a copy on the
// same timeline hands out the same ids again.
type TxnSnapshot struct {
	// Xmin and Xmax are the snapshot's bounds as 64-bit transaction ids
	// (xid8: epoch and id).
	Xmin, Xmax uint64
	// LSN is the server's WAL insert position read after the snapshot.
	LSN uint64
	// Timeline is the timeline LSN is on.
	Timeline int32
	// Taken is the server's clock just after the snapshot; ServerStart
	// the start of the server process that took it
	// (pg_postmaster_start_time()).
	Taken, ServerStart time.Time
}

// Known reports whether s holds a snapshot at all.
func (s TxnSnapshot) Known() bool { return s.LSN != 0 }

// CheckpointStore keeps the latest [Checkpoint] of a relay outside
// PostgreSQL, so that a lost, dropped or replaced replication slot can be
// told apart from one that is merely behind.
//
// A store is made for one [CheckpointKey]. Load is called once when the
// source starts, before the first Save; Save is then called from one
// goroutine, never concurrently with another Save or with Load. EndLSN
// decreases only when the relay starts over on a new slot after a loss
// it was told to accept. Close is called once, after the last Save has
// returned.
type CheckpointStore interface {
	// Load returns the latest checkpoint saved under the store's key.
	// When none was, but one was saved for the same database and slot
	// by another cluster (another system identifier), Load returns the
	// latest such, and the caller sees cp.Key.SystemID differ from its
	// own. That is either the relay's own past on the server its
	// database was moved from (a pg_upgrade, a dump restored, a
	// blue/green switch), or another relay whose database and slot
	// share the names: the store cannot tell them apart, the caller
	// must (cdc judges it against the outbox table). found is false,
	// with a nil error, only when neither was ever saved (the first
	// start). A
	// record that cannot be decoded, was written under another key than
	// it names, or by a newer version, is an error (with
	// [ErrCheckpointUnreadable]) and never skipped: the caller cannot
	// tell whether events were missed, so it must not guess.
	Load(ctx context.Context) (cp Checkpoint, found bool, err error)
	// Save stores cp durably. A nil error promises that a Load, by this
	// process or a later one, returns cp or a later checkpoint, so the
	// caller may then confirm cp.EndLSN to PostgreSQL. It blocks until
	// the store acknowledged cp or ctx is done.
	Save(ctx context.Context, cp Checkpoint) error
	// Close releases the store's connections.
	Close()
}

// CheckpointRecorder is a [CheckpointStore] whose checkpoints are written
// by a [Transactional] sink, in the Kafka transaction of the events they
// cover (kafka.delivery exactly_once): Save does nothing, Message gives
// the record to commit, and Load reads only committed records.
type CheckpointRecorder interface {
	CheckpointStore
	// Fence makes this relay the one writer of its transactions: any
	// other instance can no longer commit, and the transaction it left
	// open is aborted. The source calls it on taking over the slot,
	// before reading the checkpoint.
	Fence(ctx context.Context) error
	// Message returns the record that saves cp.
	Message(cp Checkpoint) (*Message, error)
	// Transactions reports whether the sink writes the checkpoints; when
	// false, Save does, and Fence and Message are not needed.
	Transactions() bool
}

// ErrCheckpointUnreadable marks a checkpoint record that exists but
// cannot be trusted: corrupt, written for another key, or by a newer
// relay. The relay stops on it; it never falls back to the slot alone.
var ErrCheckpointUnreadable = errors.New("checkpoint record unreadable")

// checkpointJSON is the wire form: field names are part of the format, so
// a rename needs a new version.
type checkpointJSON struct {
	Version      int       `json:"version"`
	SystemID     string    `json:"system_identifier"`
	Database     string    `json:"database"`
	Slot         string    `json:"slot"`
	EndLSN       string    `json:"end_lsn"`
	CommitTime   time.Time `json:"commit_time"`
	Timeline     int32     `json:"timeline,omitempty"`
	LastEventID  string    `json:"last_event_id"`
	Events       int64     `json:"events"`
	RelayVersion string    `json:"relay_version"`
	Written      time.Time `json:"written"`
	// SnapshotPending is left out when false, as almost always.
	SnapshotPending bool `json:"snapshot_pending,omitempty"`
	// LastTxn (version 2) is left out when not known.
	LastTxn *txnJSON `json:"last_txn,omitempty"`
	// TxnSnapshot (version 3) is left out when none was taken.
	TxnSnapshot *txnSnapshotJSON `json:"txn_snapshot,omitempty"`
}

// txnSnapshotJSON writes the ids as decimal strings, as PostgreSQL writes
// xid8: a JSON number above 2^53 is not exact in every reader.
type txnSnapshotJSON struct {
	Xmin        string    `json:"xmin"`
	Xmax        string    `json:"xmax"`
	LSN         string    `json:"lsn"`
	Timeline    int32     `json:"timeline"`
	Taken       time.Time `json:"taken"`
	ServerStart time.Time `json:"server_start"`
}

type txnJSON struct {
	Xid        uint32     `json:"xid"`
	CommitLSN  string     `json:"commit_lsn,omitempty"`
	EndLSN     string     `json:"end_lsn"`
	CommitTime *time.Time `json:"commit_time,omitempty"`
}

// FormatLSN writes an LSN the way PostgreSQL does ("16/B374D848"), so a
// checkpoint can be compared by eye with pg_replication_slots.
func FormatLSN(lsn uint64) string {
	return fmt.Sprintf("%X/%X", uint32(lsn>>32), uint32(lsn))
}

// ParseLSN reads an LSN written as PostgreSQL writes it.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("lsn %q: want hex/hex", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// EncodeCheckpoint returns the record value for cp.
func EncodeCheckpoint(cp Checkpoint) ([]byte, error) {
	var last *txnJSON
	if t := cp.LastTxn; t.Known() {
		last = &txnJSON{Xid: t.Xid, EndLSN: FormatLSN(t.EndLSN)}
		if t.Xid != 0 {
			ct := t.CommitTime.UTC()
			last.CommitLSN, last.CommitTime = FormatLSN(t.CommitLSN), &ct
		}
	}
	var snap *txnSnapshotJSON
	if t := cp.TxnSnapshot; t.Known() {
		snap = &txnSnapshotJSON{
			Xmin: strconv.FormatUint(t.Xmin, 10), Xmax: strconv.FormatUint(t.Xmax, 10),
			LSN: FormatLSN(t.LSN), Timeline: t.Timeline, Taken: t.Taken.UTC(), ServerStart: t.ServerStart.UTC(),
		}
	}
	return json.Marshal(checkpointJSON{
		Version:      CheckpointVersion,
		SystemID:     cp.Key.SystemID,
		Database:     cp.Key.Database,
		Slot:         cp.Key.Slot,
		EndLSN:       FormatLSN(cp.EndLSN),
		CommitTime:   cp.CommitTime.UTC(),
		Timeline:     cp.Timeline,
		LastEventID:  cp.LastEventID,
		Events:       cp.Events,
		RelayVersion: cp.RelayVersion,
		Written:      cp.Written.UTC(),

		SnapshotPending: cp.SnapshotPending,
		LastTxn:         last,
		TxnSnapshot:     snap,
	})
}

// DecodeCheckpoint reads a record value written for want. Every failure
// wraps [ErrCheckpointUnreadable] and says what was wrong.
func DecodeCheckpoint(want CheckpointKey, value []byte) (Checkpoint, error) {
	bad := func(format string, a ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: key %s: %s", ErrCheckpointUnreadable, want, fmt.Sprintf(format, a...))
	}
	// Read the version alone first: a newer format may change any other
	// field, and its error should say "newer", not "corrupt".
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return bad("not JSON (%v); the record is corrupt or not a checkpoint", err)
	}
	if v.Version == nil {
		return bad("no \"version\" field; the record is not a checkpoint")
	}
	if *v.Version > CheckpointVersion {
		return bad("version %d was written by a newer relay (this one reads up to %d); run that version or newer", *v.Version, CheckpointVersion)
	}
	if *v.Version < 1 {
		return bad("version %d is not a valid checkpoint version", *v.Version)
	}
	var j checkpointJSON
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return bad("version %d: %v", j.Version, err)
	}
	got := CheckpointKey{SystemID: j.SystemID, Database: j.Database, Slot: j.Slot}
	if got != want {
		return bad("record names system_identifier %q, database %q, slot %q: it belongs to another relay or cluster",
			got.SystemID, got.Database, got.Slot)
	}
	lsn, err := ParseLSN(j.EndLSN)
	if err != nil {
		return bad("end_lsn: %v", err)
	}
	if j.Events < 0 {
		return bad("events %d is negative", j.Events)
	}
	var last CheckpointTxn
	if t := j.LastTxn; t != nil {
		if j.Version < 2 {
			return bad("version %d has no last_txn; the record was altered", j.Version)
		}
		if last, err = decodeTxn(t, lsn); err != nil {
			return bad("last_txn: %v", err)
		}
	}
	var snap TxnSnapshot
	if t := j.TxnSnapshot; t != nil {
		if j.Version < 3 {
			return bad("version %d has no txn_snapshot; the record was altered", j.Version)
		}
		if snap, err = decodeTxnSnapshot(t, lsn); err != nil {
			return bad("txn_snapshot: %v", err)
		}
	}
	return Checkpoint{
		Key:          got,
		EndLSN:       lsn,
		CommitTime:   j.CommitTime,
		Timeline:     j.Timeline,
		LastEventID:  j.LastEventID,
		Events:       j.Events,
		RelayVersion: j.RelayVersion,
		Written:      j.Written,

		SnapshotPending: j.SnapshotPending,
		LastTxn:         last,
		TxnSnapshot:     snap,
	}, nil
}

// decodeTxnSnapshot reads a txn_snapshot, which a checkpoint carries only
// once its end_lsn has passed the snapshot's position.
func decodeTxnSnapshot(t *txnSnapshotJSON, end uint64) (TxnSnapshot, error) {
	var s TxnSnapshot
	var err error
	if s.Xmin, err = strconv.ParseUint(t.Xmin, 10, 64); err != nil {
		return TxnSnapshot{}, fmt.Errorf("xmin %q: %w", t.Xmin, err)
	}
	if s.Xmax, err = strconv.ParseUint(t.Xmax, 10, 64); err != nil {
		return TxnSnapshot{}, fmt.Errorf("xmax %q: %w", t.Xmax, err)
	}
	if s.LSN, err = ParseLSN(t.LSN); err != nil {
		return TxnSnapshot{}, fmt.Errorf("lsn: %w", err)
	}
	s.Timeline, s.Taken, s.ServerStart = t.Timeline, t.Taken, t.ServerStart
	switch {
	case s.LSN == 0:
		return TxnSnapshot{}, errors.New("lsn 0/0 is not a position")
	case s.LSN > end:
		return TxnSnapshot{}, fmt.Errorf("lsn %s is after the checkpoint's %s", t.LSN, FormatLSN(end))
	case s.Xmin == 0 || s.Xmin > s.Xmax:
		return TxnSnapshot{}, fmt.Errorf("xmin %d and xmax %d are not a snapshot's bounds", s.Xmin, s.Xmax)
	case s.Timeline < 1:
		return TxnSnapshot{}, fmt.Errorf("timeline %d is not a timeline", s.Timeline)
	case s.Taken.IsZero() || s.ServerStart.IsZero():
		return TxnSnapshot{}, errors.New("taken or server_start is missing")
	}
	return s, nil
}

// decodeTxn reads a last_txn that must end at or before the checkpoint's
// end_lsn.
func decodeTxn(t *txnJSON, end uint64) (CheckpointTxn, error) {
	tx := CheckpointTxn{Xid: t.Xid}
	var err error
	if tx.EndLSN, err = ParseLSN(t.EndLSN); err != nil {
		return CheckpointTxn{}, fmt.Errorf("end_lsn: %w", err)
	}
	switch {
	case tx.EndLSN == 0:
		return CheckpointTxn{}, errors.New("end_lsn 0/0 is not a position")
	case tx.EndLSN > end:
		return CheckpointTxn{}, fmt.Errorf("end_lsn %s is after the checkpoint's %s", t.EndLSN, FormatLSN(end))
	case tx.Xid == 0 && (t.CommitLSN != "" || t.CommitTime != nil):
		return CheckpointTxn{}, errors.New("xid 0 (no transaction) with a commit_lsn or commit_time")
	case tx.Xid == 0:
		return tx, nil
	case t.CommitTime == nil:
		return CheckpointTxn{}, fmt.Errorf("xid %d has no commit_time", tx.Xid)
	}
	if tx.CommitLSN, err = ParseLSN(t.CommitLSN); err != nil {
		return CheckpointTxn{}, fmt.Errorf("commit_lsn: %w", err)
	}
	if tx.CommitLSN == 0 || tx.CommitLSN >= tx.EndLSN {
		return CheckpointTxn{}, fmt.Errorf("commit_lsn %s is not before end_lsn %s", t.CommitLSN, t.EndLSN)
	}
	tx.CommitTime = *t.CommitTime
	return tx, nil
}
