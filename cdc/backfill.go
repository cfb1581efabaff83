package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
)

// A backfill publishes again the outbox rows a lost slot may have missed,
// from the table itself, and leaves the slot and the checkpoint so that
// the relay's next start carries on with no gap and nothing lost:
//
//   - slot gone or invalidated (whoever wrote the checkpoint): it creates
//     the slot with an exported snapshot (dropping an invalidated one
//     first) and reads the rows in that snapshot, as cdc.snapshot initial
//     does, so every row committed after the checkpoint is either in the
//     snapshot or after the slot's consistent point;
//   - slot there but ahead of the checkpoint, or the checkpoint another
//     cluster's: it reads the rows now and carries on from the slot, so
//     rows committed after the slot's position come again from the
//     stream, each aggregate still in order once repeats are dropped by id.
//
// Either way the rows go through the same routing and sink before
// anything the slot streams, and the checkpoint it leaves is this
// cluster's, at the slot's position. Rows go oldest transaction first,
// as in the snapshot.
//
// Which rows: those committed at or after Since (by default the
// checkpoint's commit time), told by a timestamp column the application
// writes (with a margin, since a row's insert time comes before its
// commit), else by the commit timestamps the server keeps with
// track_commit_timestamp; or every row. Rows deleted since they were
// committed cannot come back: nothing outside the WAL kept them.

// Backfill says which outbox rows a backfill publishes.
type Backfill struct {
	// Since: rows committed at or after it. Zero: after the checkpoint,
	// at its commit time.
	Since time.Time
	// All: every row in the table.
	All bool
	// TimestampColumn is a column the application sets to the row's
	// insert time (timestamptz, timestamp, or bigint milliseconds since
	// the epoch). Empty: the commit timestamps of track_commit_timestamp.
	TimestampColumn string
	// Margin widens the TimestampColumn window back from Since: a row's
	// insert time comes before its commit. Default 5 minutes.
	Margin time.Duration
	// Done is called once, when Kafka has every row backfilled (or when
	// there is nothing to backfill); the caller then stops the source,
	// whose last checkpoint is where the relay's next start carries on.
	Done func(BackfillResult)
}

// DefaultBackfillMargin is Backfill.Margin's default.
const DefaultBackfillMargin = 5 * time.Minute

// BackfillResult is what a backfill did.
type BackfillResult struct {
	// Rows is the number of rows published.
	Rows int
	// Cause is what happened to the slot; empty when it carried on from
	// the checkpoint.
	Cause SlotLossCause
	// Since is the time the rows were chosen from (zero with All).
	Since time.Time
	// Selection says how rows were chosen, in words.
	Selection string
	// CreatedSlot: the backfill created the slot.
	CreatedSlot bool
	// NothingMissed: asked for the rows after the checkpoint, it found the
	// slot carrying on from it, and published nothing.
	NothingMissed bool
}

// WithBackfill makes the source a backfill (see [Backfill]): it publishes
// the chosen rows before streaming, and calls b.Done once Kafka has them.
// A backfill does not wait for a slot another session holds.
func WithBackfill(b Backfill) Option {
	if b.Margin == 0 {
		b.Margin = DefaultBackfillMargin
	}
	return func(s *Source) { s.backfill = &backfillState{Backfill: b} }
}

// backfillState is a backfill under way.
type backfillState struct {
	Backfill
	result BackfillResult
	job    *snapshotJob // to publish on the next connection
	// planned is the job first planned (only the source's Run touches
	// it); finished is set once Kafka has all of it.
	planned  *snapshotJob
	finished atomic.Bool
	once     sync.Once
}

func (b *backfillState) done(rows int) {
	b.once.Do(func() {
		b.finished.Store(true)
		b.result.Rows = rows
		if b.Done != nil {
			b.Done(b.result)
		}
	})
}

// planBackfill decides, in place of ensureSlot's usual course, what the
// backfill reads and where streaming then starts.
func (s *Source) planBackfill(ctx context.Context, conn *pgx.Conn, slot slotState, v verdict, cause SlotLossCause, kp *connector.Checkpoint) (slotPosition, error) {
	b := s.backfill
	if b.planned != nil && v == useSlot {
		// A reconnect while the backfill runs: what Kafka may not have
		// yet is read again, from the table as it is now.
		if !b.finished.Load() {
			job := *b.planned
			job.name = ""
			b.job = &job
		}
		return slotPosition{lsn: slot.confirmed}, nil
	}
	since := b.Since
	switch {
	case b.All:
		since = time.Time{}
	case since.IsZero() && (kp == nil || kp.CommitTime.IsZero()):
		return slotPosition{}, connector.Permanent(fmt.Errorf("no checkpoint with a commit time for slot %q in this Kafka cluster, so \"after the checkpoint\" means nothing: give the time to backfill from (--since, the checkpoint_commit_time of the ERROR that reported the loss) or --all", s.cfg.Slot))
	case since.IsZero():
		since = kp.CommitTime
	}
	job := &snapshotJob{filters: map[table]rowFilter{}, backfill: true}
	var selection string
	for _, t := range s.tables {
		f, words, err := s.backfillFilter(ctx, conn, since, t)
		if err != nil {
			return slotPosition{}, err
		}
		job.filters[t], selection = f, words
	}
	b.result = BackfillResult{Cause: cause, Since: since, Selection: selection}
	b.planned = job
	attrs := []any{"slot", s.cfg.Slot, "rows", selection}
	if kp != nil {
		attrs = append(attrs, "checkpoint_lsn", pglogrepl.LSN(kp.EndLSN).String(), "checkpoint_commit_time", kp.CommitTime)
	}
	switch v {
	case useSlot:
		// A checkpoint with a snapshot pending may be an interrupted
		// backfill's: its rows are chosen again.
		if b.Since.IsZero() && !b.All && !kp.SnapshotPending {
			s.log.Info("the slot carries on from the checkpoint: no event was missed, nothing to backfill", attrs...)
			b.result.NothingMissed = true
			b.done(0)
			return slotPosition{lsn: slot.confirmed}, nil
		}
		b.job = job
		s.log.Info("backfill: publishing the chosen outbox rows again before streaming from the slot", attrs...)
		return slotPosition{lsn: slot.confirmed}, nil
	case createSlot:
		s.log.Info("backfill: creating the slot with a snapshot and publishing the chosen outbox rows from it", attrs...)
	default:
		s.slotLosses.Add(1)
		s.log.Warn("backfill: the replication slot was lost; publishing the outbox rows committed since then again, then carrying on from the slot",
			append(attrs, "cause", string(cause))...)
	}
	b.job = job
	// The checkpoint starts over at the slot, holding the time the rows
	// were chosen from as its commit time until Kafka has them all
	// (SnapshotPending): run again after an interruption, the backfill
	// chooses the same rows.
	s.setCurrent(&connector.Checkpoint{Key: s.identity.CheckpointKey(s.cfg.Slot), CommitTime: since})
	if slot.exists && slot.lost {
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.cfg.Slot); err != nil {
			return slotPosition{}, classify("drop the invalidated replication slot", err)
		}
		slot.exists = false
	}
	if !slot.exists {
		b.result.CreatedSlot = true
		return slotPosition{create: true}, nil
	}
	return slotPosition{lsn: slot.confirmed, fresh: true}, nil
}

// rowFilter chooses rows: a WHERE clause and its parameters ($1...).
type rowFilter struct {
	where string
	args  [][]byte
}

// backfillFilter is the filter that chooses the rows of t committed at or
// after since, and those words for the log.
func (s *Source) backfillFilter(ctx context.Context, conn *pgx.Conn, since time.Time, t table) (rowFilter, string, error) {
	b := s.backfill
	if b.All {
		return rowFilter{}, "every row in the table", nil
	}
	from := since.Add(-b.Margin)
	if col := b.TimestampColumn; col != "" {
		var typ string
		err := conn.QueryRow(ctx, `SELECT format_type(a.atttypid, NULL)
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped`,
			t.schema, t.name, col).Scan(&typ)
		if errors.Is(err, pgx.ErrNoRows) {
			return rowFilter{}, "", connector.Permanent(fmt.Errorf("outbox table %s has no column %q to choose the rows to backfill by", t, col))
		}
		if err != nil {
			return rowFilter{}, "", classify("read the timestamp column's type", err)
		}
		id := pgx.Identifier{col}.Sanitize()
		words := fmt.Sprintf("rows whose %s is at or after %s (%s before %s, as a row is inserted before it commits)",
			col, from.UTC().Format(time.RFC3339Nano), b.Margin, since.UTC().Format(time.RFC3339Nano))
		switch typ {
		case "timestamp with time zone", "timestamp without time zone":
			// A timestamp without time zone compares in the session's
			// TimeZone, as now() wrote it.
			return rowFilter{id + " >= $1::timestamptz", [][]byte{[]byte(from.Format(time.RFC3339Nano))}}, words, nil
		case "bigint":
			return rowFilter{id + " >= $1::int8", [][]byte{[]byte(strconv.FormatInt(from.UnixMilli(), 10))}}, words + " (milliseconds since the epoch)", nil
		}
		return rowFilter{}, "", connector.Permanent(fmt.Errorf("column %q of %s is %s; a backfill chooses rows by a timestamptz, timestamp or bigint (milliseconds since the epoch) column", col, t, typ))
	}
	var track string
	if err := conn.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&track); err != nil {
		return rowFilter{}, "", classify("read track_commit_timestamp", err)
	}
	if track != "on" {
		return rowFilter{}, "", connector.Permanent(fmt.Errorf("the backfill cannot tell when the rows of %s were committed: name a column the application sets to the insert time (--timestamp-column), "+
			"or publish every row in the table (--all; consumers drop the repeats by id); "+
			"track_commit_timestamp = on would let it read commit times, but only of transactions committed after it is set", t))
	}
	// A row whose commit time the server no longer knows (frozen, or
	// committed before track_commit_timestamp was on) is published too:
	// a repeat costs less than a loss.
	return rowFilter{"coalesce(pg_xact_commit_timestamp(xmin) >= $1::timestamptz, true)", [][]byte{[]byte(since.Format(time.RFC3339Nano))}},
		fmt.Sprintf("rows committed at or after %s (track_commit_timestamp), and rows whose commit time the server no longer knows", since.UTC().Format(time.RFC3339Nano)), nil
}
