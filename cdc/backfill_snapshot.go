package cdc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// A backfill after the checkpoint chooses rows by the checkpoint's
// transaction snapshot when it proves something on this server
// (txnsnapshot.go): a row whose xmin, widened to 64 bits, is below the
// snapshot's xmin is in Kafka, so it is left out, whatever the time since.
// The proof holds on the history the snapshot was taken on, which the
// server shows in one of two ways:
//
//   - a later timeline that branched off after the snapshot's position (a
//     promoted standby, a point-in-time recovery past it), read from the
//     timeline history (TIMELINE_HISTORY);
//   - the same timeline and the same server process as when it was taken
//     (pg_postmaster_start_time()): a server restored from a copy starts
//     anew, and hands out the ids after the copy's again.
//
// Otherwise, on the same timeline after a restart, the snapshot serves
// only with a time that says a row came before it (the commit timestamps
// of track_commit_timestamp, or the insert-time column): a row written
// after a restore is later than the snapshot, so it is published. Without
// either, the backfill chooses by time as before, or refuses.

// txnProof is what the checkpoint's transaction snapshot proves on this
// server, worked out once per backfill.
type txnProof struct {
	// snap is the snapshot; zero when it proves nothing here, and why
	// says why.
	snap connector.TxnSnapshot
	why  string
	// history: the server's history holds the snapshot's, so the ids
	// below its xmin are the transactions it saw end.
	history bool
}

// xidWrapHorizon is how far behind the server's next transaction id a
// snapshot's xmin may be: every row not frozen has an xmin within it, so
// widening a row's 32-bit xmin by the server's epoch is exact.
const xidWrapHorizon = 1 << 31

// checkTxnSnapshot works out what the checkpoint kp's transaction snapshot
// proves on this server, for a slot lost with cause.
func (s *Source) checkTxnSnapshot(ctx context.Context, conn *pgx.Conn, kp *connector.Checkpoint, cause SlotLossCause) (txnProof, error) {
	none := func(why string) (txnProof, error) { return txnProof{why: why}, nil }
	switch {
	case kp == nil || !kp.TxnSnapshot.Known():
		return none("the checkpoint carries no transaction snapshot (written by a relay older than checkpoint version 3, reading a standby, or before its first snapshot was in a checkpoint)")
	case kp.Key.SystemID != s.key().SystemID:
		return none("the checkpoint is another cluster's")
	case cause == CauseRestored || cause == CauseBehind:
		return none("this server's history is not the one the checkpoint was written on (" + string(cause) + ")")
	}
	snap := kp.TxnSnapshot
	var start time.Time
	var wal, next string
	var walFile *string
	// The timeline from the WAL file name: the relay identified the
	// server when it started, which may be before a promotion.
	err := conn.QueryRow(ctx, `SELECT pg_postmaster_start_time(), `+pgsql.WALEnd+`::text, pg_snapshot_xmax(pg_current_snapshot())::text,
			CASE WHEN NOT pg_is_in_recovery() THEN pg_walfile_name(pg_current_wal_insert_lsn()) END`).Scan(&start, &wal, &next, &walFile)
	if err != nil {
		return txnProof{}, classify("read the server's position for the checkpoint's transaction snapshot", err)
	}
	walLSN, err := pglogrepl.ParseLSN(wal)
	if err != nil {
		return txnProof{}, fmt.Errorf("the server's WAL position %q: %w", wal, err)
	}
	nextXid, err := strconv.ParseUint(next, 10, 64)
	if err != nil {
		return txnProof{}, fmt.Errorf("the server's next transaction id %q: %w", next, err)
	}
	current := s.ckpt.identity.Timeline
	if walFile != nil {
		if current, err = walFileTimeline(*walFile); err != nil {
			return txnProof{}, err
		}
	}
	switch {
	case nextXid < snap.Xmin:
		return none(fmt.Sprintf("the server's next transaction id %d is before the snapshot's xmin %d", nextXid, snap.Xmin))
	case nextXid-snap.Xmin >= xidWrapHorizon:
		return none(fmt.Sprintf("it was taken %d transactions ago, too long for 32-bit row ids to be widened", nextXid-snap.Xmin))
	case uint64(walLSN) < snap.LSN:
		return none(fmt.Sprintf("the server's WAL, at %s, has not reached its position %s", walLSN, pglogrepl.LSN(snap.LSN)))
	case snap.Timeline > current:
		return none(fmt.Sprintf("it was taken on timeline %d, after this server's %d", snap.Timeline, current))
	case snap.Timeline == current:
		return txnProof{snap: snap, history: start.Equal(snap.ServerStart)}, nil
	}
	switched, err := s.timelineEnd(ctx, current, snap.Timeline)
	if err != nil {
		return txnProof{}, err
	}
	if switched < snap.LSN {
		return none(fmt.Sprintf("timeline %d ended at %s in this server's history, before its position %s", snap.Timeline, pglogrepl.LSN(switched), pglogrepl.LSN(snap.LSN)))
	}
	return txnProof{snap: snap, history: true}, nil
}

// timelineEnd is where timeline tli ends in the history of the server's
// timeline current (TIMELINE_HISTORY, on a replication connection); 0
// when tli is not in it.
func (s *Source) timelineEnd(ctx context.Context, current, tli int32) (uint64, error) {
	conn, err := connectReplication(ctx, s.cfg.URL, s.cfg.Network)
	if err != nil {
		return 0, classify("open a replication connection to read the timeline history", err)
	}
	defer pgsql.Close(ctx, conn)
	res, err := pglogrepl.TimelineHistory(ctx, conn, current)
	if err != nil {
		return 0, classify(fmt.Sprintf("read the history of timeline %d", current), err)
	}
	ends, err := parseTimelineHistory(res.Content)
	if err != nil {
		return 0, fmt.Errorf("the history of timeline %d (%s): %w", current, res.FileName, err)
	}
	return ends[tli], nil
}

// parseTimelineHistory reads a timeline history file: a line per earlier
// timeline, its id, the LSN where the next began, and a reason.
func parseTimelineHistory(content []byte) (map[int32]uint64, error) {
	ends := map[int32]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(content))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %q: want a timeline and an LSN", line)
		}
		tli, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		lsn, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		ends[int32(tli)] = uint64(lsn)
	}
	return ends, sc.Err()
}

// rowXid8 is a row's xmin widened to 64 bits by the epoch of the reading
// snapshot's xmax, which every row it sees is below; a frozen row older
// than 2^32 transactions comes out too recent, and is published again.
const rowXid8 = `((SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8) - (((SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8) % 4294967296) - xmin::text::int8 + 4294967296) % 4294967296)`

// snapshotFilter is the filter that chooses the rows of a table that the
// proof does not show in Kafka, with col (the insert-time column, nil for
// none) and the commit timestamps (track) as the time that says a row
// came before the snapshot; ok is false when the proof needs a time and
// there is none. since is the checkpoint's commit time: chosen rows
// inserted (or committed) before it are reported as repeats Kafka may
// have.
func snapshotFilter(proof txnProof, since time.Time, col *timestampColumn, track bool) (f rowFilter, words string, ok bool) {
	snap := proof.snap
	// Ids 1 and 2 (bootstrap, frozen before 9.4) are older than anything.
	known := fmt.Sprintf("(xmin::text::int8 < 3 OR %s < %s)", rowXid8, f.param(strconv.FormatUint(snap.Xmin, 10), "int8"))
	taken := snap.Taken.UTC().Format(time.RFC3339Nano)
	var guard, also string
	switch {
	case track:
		unknown := "false"
		switch {
		case col != nil:
			unknown = "NOT (" + col.atOrAfter(&f, snap.Taken) + ")"
		case proof.history:
			unknown = "true"
		}
		guard = fmt.Sprintf("coalesce(pg_xact_commit_timestamp(xmin) < %s, %s)", f.param(taken, "timestamptz"), unknown)
		also = ", or committed after it (track_commit_timestamp)"
	case col != nil:
		guard = "NOT (" + col.atOrAfter(&f, snap.Taken) + ")"
		also = fmt.Sprintf(", or whose %s is at or after it%s", col.name, col.unit)
	case !proof.history:
		return rowFilter{}, "", false
	}
	if guard != "" {
		known += " AND " + guard
	}
	f.where = "NOT coalesce(" + known + ", false)"
	f.repeat, f.reasons = "1", []string{"committed after the checkpoint's transaction snapshot was taken, or running then: the snapshot cannot tell the ones Kafka had from the gap"}
	switch at := since.Format(time.RFC3339Nano); {
	case track || col != nil:
		after := "false"
		if col != nil {
			after = col.atOrAfter(&f, since)
		}
		if track {
			after = fmt.Sprintf("coalesce(pg_xact_commit_timestamp(xmin) > %s, %s)", f.param(at, "timestamptz"), after)
		}
		f.repeat = fmt.Sprintf("CASE WHEN %s THEN 0 ELSE 1 END", after)
		f.reasons = []string{fmt.Sprintf("committed after the checkpoint's transaction snapshot was taken, or running then, and before %s, the checkpoint's last event: Kafka may have had them", since.UTC().Format(time.RFC3339Nano))}
	}
	words = fmt.Sprintf("rows whose inserting transaction had not ended when the checkpoint's transaction snapshot was taken (xmin %d, at %s, WAL %s on timeline %d)%s",
		snap.Xmin, taken, pglogrepl.LSN(snap.LSN), snap.Timeline, also)
	return f, words, true
}
