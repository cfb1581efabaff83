package cdc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
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
// checkpoint's commit time), told by the commit timestamps the server
// keeps with track_commit_timestamp when it does, else by a timestamp
// column the application writes (with a margin, since a row's insert
// time comes before its commit); or every row. The commit timestamps are
// a bound from the database itself: what they choose beyond the gap is
// the second before the checkpoint's last event, not the margin's
// minutes. The column then serves only for rows whose commit time the
// server does not know. Rows deleted since they were committed cannot
// come back: nothing outside the WAL kept them.

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
	// insert time comes before its commit. Nil: DefaultBackfillMargin; a
	// zero Margin is none, for rows whose application sets the column to
	// the commit time.
	Margin *time.Duration
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
	// Repeats are the rows published that were committed, or inserted,
	// before Since, so that Kafka may have had them already, by why they
	// were chosen. None with All, where every row before the checkpoint
	// is one.
	Repeats []BackfillRepeats
}

// BackfillRepeats is a count of rows a backfill published that Kafka may
// have had already, and why it chose them.
type BackfillRepeats struct {
	Rows int
	Why  string
}

// RepeatsWords says what Repeats holds, for a log line or a report:
// "12 committed ...; 3 whose ...", or "none".
func (r BackfillResult) RepeatsWords() string {
	if len(r.Repeats) == 0 {
		return "none"
	}
	parts := make([]string, len(r.Repeats))
	for i, x := range r.Repeats {
		parts[i] = fmt.Sprintf("%d %s", x.Rows, x.Why)
	}
	return strings.Join(parts, "; ")
}

// RepeatedRows is the number of rows in Repeats.
func (r BackfillResult) RepeatedRows() int {
	n := 0
	for _, x := range r.Repeats {
		n += x.Rows
	}
	return n
}

// WithBackfill makes the source a backfill (see [Backfill]): it publishes
// the chosen rows before streaming, and calls b.Done once Kafka has them.
// A backfill does not wait for a slot another session holds.
func WithBackfill(b Backfill) Option {
	margin := DefaultBackfillMargin
	if b.Margin != nil {
		margin = *b.Margin
	}
	return func(s *Source) { s.backfill = &backfillState{Backfill: b, margin: margin} }
}

// backfillState is a backfill under way.
type backfillState struct {
	Backfill
	// margin is Margin, defaulted.
	margin time.Duration
	result BackfillResult
	job    *snapshotJob // to publish on the next connection
	// planned is the job first planned (only the source's Run touches
	// it); finished is set once Kafka has all of it.
	planned  *snapshotJob
	finished atomic.Bool
	once     sync.Once
}

func (b *backfillState) done(rows int, repeats []BackfillRepeats) {
	b.once.Do(func() {
		b.finished.Store(true)
		b.result.Rows, b.result.Repeats = rows, repeats
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
	job, selection, chosenBy, err := s.chooseRows(ctx, conn, since, cause, kp)
	if err != nil {
		return slotPosition{}, err
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
			b.done(0, nil)
			return slotPosition{lsn: slot.confirmed}, nil
		}
		b.job = job
		s.log.Info("backfill: publishing the chosen outbox rows again before streaming from the slot", attrs...)
		return slotPosition{lsn: slot.confirmed}, nil
	case createSlot:
		s.log.Info("backfill: creating the slot with a snapshot and publishing the chosen outbox rows from it", attrs...)
	default:
		s.count.lossFound()
		s.log.Warn("backfill: the replication slot was lost; publishing the outbox rows committed since then again, then carrying on from the slot",
			append(attrs, "cause", string(cause))...)
	}
	b.job = job
	// The checkpoint starts over at the slot, holding the time the rows
	// were chosen from as its commit time until Kafka has them all
	// (SnapshotPending): run again after an interruption, the backfill
	// chooses the same rows.
	// The transaction snapshot the rows were chosen by goes on being true:
	// what it saw is in Kafka, what it did not is being published.
	s.setCurrent(&connector.Checkpoint{Key: s.key(), CommitTime: since, TxnSnapshot: chosenBy})
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

// chooseRows is the job that reads the rows a backfill publishes, chosen
// from since, with those words for the log, and the checkpoint's
// transaction snapshot when they were chosen by it (zero when not).
func (s *Source) chooseRows(ctx context.Context, conn *pgx.Conn, since time.Time, cause SlotLossCause, kp *connector.Checkpoint) (*snapshotJob, string, connector.TxnSnapshot, error) {
	b := s.backfill
	afterCheckpoint := !b.All && b.Since.IsZero()
	var proof txnProof
	if afterCheckpoint {
		var err error
		if proof, err = s.checkTxnSnapshot(ctx, conn, kp, cause); err != nil { // backfill_snapshot.go
			return nil, "", connector.TxnSnapshot{}, err
		}
	}
	job := &snapshotJob{filters: map[table]rowFilter{}, backfill: true}
	var selection string
	used := false
	for _, t := range s.tables {
		f, words, bySnapshot, err := s.backfillFilter(ctx, conn, since, t, proof)
		if err != nil {
			s.snapshotUnused(proof)
			return nil, "", connector.TxnSnapshot{}, err
		}
		job.filters[t], selection = f, words
		used = used || bySnapshot
	}
	if !used {
		if afterCheckpoint {
			s.snapshotUnused(proof)
		}
		return job, selection, connector.TxnSnapshot{}, nil
	}
	return job, selection, proof.snap, nil
}

// snapshotUnused says why a backfill after the checkpoint chooses its rows
// by time, not by the checkpoint's transaction snapshot.
func (s *Source) snapshotUnused(proof txnProof) {
	why := proof.why
	if why == "" {
		why = "the server has restarted on the same timeline since it was taken, as one restored from a copy would, and no commit times or insert-time column say which rows came before it"
	}
	s.log.Info("backfill: the checkpoint's transaction snapshot does not serve here; choosing the rows by time", "slot", s.cfg.Slot, "why", why)
}

// rowFilter chooses rows: a WHERE clause and its parameters ($1...).
type rowFilter struct {
	where string
	args  [][]byte
	// repeat, when set, is an SQL expression over the same parameters
	// that tells, for a row chosen, whether Kafka may have it already: 0
	// when it was committed after the point chosen from, else 1 + the
	// index in reasons of why it was chosen all the same.
	repeat  string
	reasons []string
}

// param adds a parameter to f, returning its placeholder cast to typ.
func (f *rowFilter) param(v, typ string) string {
	f.args = append(f.args, []byte(v))
	return fmt.Sprintf("$%d::%s", len(f.args), typ)
}

// commitTimeSkew is how far before the checkpoint's commit time a backfill
// by commit timestamps reaches. A transaction takes its commit timestamp
// just before it writes its commit record, so two that commit at once may
// write their records in the other order, and a clock may be set back a
// little: a transaction stamped a moment before the checkpoint's last one
// may still come after it in the WAL, which is the order the relay reads.
// What is stamped this close before is published again rather than proved
// to be in Kafka.
const commitTimeSkew = time.Second

// backfillFilter is the filter that chooses the rows of t committed at or
// after since, and those words for the log: by the checkpoint's
// transaction snapshot when proof holds one that serves (bySnapshot),
// else by time.
func (s *Source) backfillFilter(ctx context.Context, conn *pgx.Conn, since time.Time, t table, proof txnProof) (f rowFilter, words string, bySnapshot bool, err error) {
	b := s.backfill
	if b.All {
		return rowFilter{}, "every row in the table", false, nil
	}
	var track string
	if err := conn.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&track); err != nil {
		return rowFilter{}, "", false, classify("read track_commit_timestamp", err)
	}
	var col *timestampColumn
	if b.TimestampColumn != "" {
		c, err := s.readTimestampColumn(ctx, conn, t, b.TimestampColumn)
		if err != nil {
			return rowFilter{}, "", false, err
		}
		col = &c
	}
	if proof.snap.Known() {
		if f, words, ok := snapshotFilter(proof, since, col, track == "on"); ok {
			return f, words, true, nil
		}
	}
	f, words, err = s.timeFilter(since, t, col, track == "on")
	return f, words, false, err
}

// timeFilter is the filter that chooses the rows of t committed at or
// after since by time: the commit timestamps when the server keeps them
// (track), the insert-time column col, or both.
func (s *Source) timeFilter(since time.Time, t table, col *timestampColumn, track bool) (rowFilter, string, error) {
	b := s.backfill
	from := since.Add(-b.margin)
	at := since.UTC().Format(time.RFC3339Nano)
	var f rowFilter
	if !track {
		if col == nil {
			return rowFilter{}, "", connector.Permanent(fmt.Errorf("the backfill cannot tell when the rows of %s were committed: name a column the application sets to the insert time (--timestamp-column), "+
				"or publish every row in the table (--all; consumers drop the repeats by id); "+
				"track_commit_timestamp = on would let it read commit times, but only of transactions committed after it is set", t))
		}
		f.where = col.atOrAfter(&f, from)
		f.repeat = fmt.Sprintf("CASE WHEN %s THEN 0 ELSE 1 END", col.atOrAfter(&f, since))
		f.reasons = []string{fmt.Sprintf("inserted before %s, within --margin %s of it (a row is inserted before it commits, so the time of a row's insert does not tell whether Kafka has it)", at, b.margin)}
		words := fmt.Sprintf("rows whose %s is at or after %s (%s before %s, as a row is inserted before it commits)",
			col.name, from.UTC().Format(time.RFC3339Nano), b.margin, at)
		return f, words + col.unit, nil
	}
	// A row whose commit time the server no longer knows (committed
	// before track_commit_timestamp was on, or too long ago) is chosen by
	// the column when there is one, else published whatever its age: a
	// repeat costs less than a loss.
	const ts = "pg_xact_commit_timestamp(xmin)"
	unknown, unknownWhy := "true", "whose commit time the server does not know (committed before track_commit_timestamp was on, or too long ago), which are published whatever their age"
	unknownRepeat := "2"
	words := fmt.Sprintf("rows committed at or after %s (track_commit_timestamp; %s earlier, as commit times may be out of commit order by a little), and rows whose commit time the server does not know",
		since.Add(-commitTimeSkew).UTC().Format(time.RFC3339Nano), commitTimeSkew)
	f.where = fmt.Sprintf("coalesce(%s >= %s, ", ts, f.param(since.Add(-commitTimeSkew).Format(time.RFC3339Nano), "timestamptz"))
	if col != nil {
		unknown = col.atOrAfter(&f, from)
		unknownRepeat = fmt.Sprintf("CASE WHEN %s THEN 0 ELSE 2 END", col.atOrAfter(&f, since))
		unknownWhy = fmt.Sprintf("whose commit time the server does not know (committed before track_commit_timestamp was on, or too long ago) and that were inserted before %s, within --margin %s of it", at, b.margin)
		words = fmt.Sprintf("rows committed at or after %s (track_commit_timestamp; %s earlier, as commit times may be out of commit order by a little), and rows whose commit time the server does not know and whose %s is at or after %s (--margin %s before)%s",
			since.Add(-commitTimeSkew).UTC().Format(time.RFC3339Nano), commitTimeSkew, col.name, from.UTC().Format(time.RFC3339Nano), b.margin, col.unit)
	}
	f.where += unknown + ")"
	f.repeat = fmt.Sprintf("CASE WHEN %s IS NULL THEN %s WHEN %s <= %s THEN 1 ELSE 0 END", ts, unknownRepeat, ts, f.param(since.Format(time.RFC3339Nano), "timestamptz"))
	f.reasons = []string{
		fmt.Sprintf("committed in the %s up to %s, or at it, which the commit times cannot tell from the gap: they may be out of commit order by a little", commitTimeSkew, at),
		unknownWhy,
	}
	return f, words, nil
}

// timestampColumn is a column the application sets to the insert time.
type timestampColumn struct {
	name string
	// bigint: milliseconds since the epoch; else a timestamp.
	bigint bool
	unit   string // words for the log
}

// readTimestampColumn looks up the column of t that a backfill chooses
// rows by, and checks its type.
func (s *Source) readTimestampColumn(ctx context.Context, conn *pgx.Conn, t table, col string) (timestampColumn, error) {
	tc, found, err := pgsql.ReadTimeColumn(ctx, conn, t.schema, t.name, col)
	switch {
	case err != nil:
		return timestampColumn{}, classify("read the timestamp column's type", err)
	case !found:
		return timestampColumn{}, connector.Permanent(fmt.Errorf("outbox table %s has no column %q to choose the rows to backfill by", t, col))
	case !tc.Usable():
		return timestampColumn{}, connector.Permanent(fmt.Errorf("column %q of %s is %s; a backfill chooses rows by a timestamptz, timestamp or bigint (milliseconds since the epoch) column", col, t, tc.Type))
	case tc.Millis():
		return timestampColumn{name: col, bigint: true, unit: " (milliseconds since the epoch)"}, nil
	}
	return timestampColumn{name: col}, nil
}

// atOrAfter is the condition that the column is at or after at, adding
// its parameter to f.
func (c timestampColumn) atOrAfter(f *rowFilter, at time.Time) string {
	id := pgx.Identifier{c.name}.Sanitize()
	if c.bigint {
		return id + " >= " + f.param(strconv.FormatInt(at.UnixMilli(), 10), "int8")
	}
	// A timestamp without time zone compares in the session's TimeZone,
	// as now() wrote it.
	return id + " >= " + f.param(at.Format(time.RFC3339Nano), "timestamptz")
}

// A slot-loss error names the backfill command that works for the relay's
// table, with the relay's own configuration flags, so that it can be run
// as printed: by commit times when the server keeps them, else by a
// column that holds each row's insert time (routing.timestamp_column, or
// one whose default is the time of the insert), else every row.

// BackfillAdvice is what a slot-loss error needs to name the backfill
// command that works for this relay.
type BackfillAdvice struct {
	// ConfigFlags give the backfill the relay's configuration, as the
	// relay was started: "--config /etc/outboxrelay/relay.yaml". Empty:
	// the relay was configured by its environment alone.
	ConfigFlags string
	// TimestampColumn is the column the backfill reads the insert time
	// from by default (routing.timestamp_column). Empty: none configured;
	// the error then names one the table's catalog shows, if any.
	TimestampColumn string
}

// WithBackfillAdvice tells the source how the relay was configured, for
// the backfill command its slot-loss errors print.
func WithBackfillAdvice(a BackfillAdvice) Option {
	return func(s *Source) { s.recovery.BackfillAdvice = a }
}

// recovery is the backfill command a slot-loss error prints, worked out
// when the loss is found.
type recovery struct {
	BackfillAdvice
	// flags choose the rows ("--timestamp-column created_at", "--all"),
	// and why says why they work for this table; both empty until
	// adviseBackfill ran.
	flags, why string
	known      bool
}

// insertTimeDefault matches the default of a column that holds the time
// its row was inserted.
const insertTimeDefault = `(now|clock_timestamp|statement_timestamp|transaction_timestamp)\(\)|current_timestamp|localtimestamp`

// adviseBackfill works out which backfill flags choose the rows of a gap
// in this relay's tables. A failure to read the catalog leaves the advice
// general: the error it goes into matters more.
func (s *Source) adviseBackfill(ctx context.Context, conn *pgx.Conn, kp *connector.Checkpoint, cause SlotLossCause) {
	r := &s.recovery
	var track string
	if err := conn.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&track); err != nil {
		s.log.Debug("read track_commit_timestamp for the backfill advice", "err", err)
		return
	}
	col, err := s.insertTimeColumn(ctx, conn)
	if err != nil {
		s.log.Debug("look for an insert-time column for the backfill advice", "err", err)
		return
	}
	r.known = true
	switch {
	case track == "on" && col != "":
		r.flags = "--timestamp-column " + shellWord(col)
		r.why = fmt.Sprintf("track_commit_timestamp is on, so it chooses the rows by the commit times the server kept, and by %s, the insert time, those whose commit time the server does not know", col)
	case track == "on":
		r.flags = ""
		r.why = "track_commit_timestamp is on, so it chooses the rows by the commit times the server kept"
	case col != "":
		r.flags = "--timestamp-column " + shellWord(col)
		r.why = fmt.Sprintf("%s holds each row's insert time, and it chooses the rows inserted since --margin (5m) before the checkpoint's last event, or, when the checkpoint's transaction snapshot serves, those whose transaction had not ended when it was taken", col)
	case s.cfg.OnSlotLoss == SlotLossFail && s.snapshotServes(ctx, conn, kp, cause):
		// Only after the checkpoint: with recreate the relay goes on
		// past the gap, and the backfill it prints is --since a time.
		r.flags = ""
		r.why = "the checkpoint carries a transaction snapshot that this server's history holds, so it chooses the rows whose transaction had not ended when the snapshot was taken"
	default:
		r.flags = "--all"
		r.why = "the table has no column holding each row's insert time and the server keeps no commit times, track_commit_timestamp being off: only every row is sure to hold the gap. " +
			"A column such as created_at timestamptz NOT NULL DEFAULT now(), or track_commit_timestamp on, lets a later backfill publish only the gap"
	}
}

// snapshotServes reports whether the checkpoint kp's transaction snapshot
// chooses the rows of the gap on its own here, with no time to guard it.
func (s *Source) snapshotServes(ctx context.Context, conn *pgx.Conn, kp *connector.Checkpoint, cause SlotLossCause) bool {
	proof, err := s.checkTxnSnapshot(ctx, conn, kp, cause)
	if err != nil {
		s.log.Debug("judge the checkpoint's transaction snapshot for the backfill advice", "err", err)
		return false
	}
	return proof.snap.Known() && proof.history
}

// insertTimeColumn is the column every outbox table has that holds its
// rows' insert time: routing.timestamp_column when it is set and there,
// else the first timestamp or bigint column whose default is the time
// of the insert; "" when there is none.
func (s *Source) insertTimeColumn(ctx context.Context, conn *pgx.Conn) (string, error) {
	var common []string
	for i, t := range s.tables {
		rows, err := conn.Query(ctx, `SELECT a.attname
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
			  AND format_type(a.atttypid, NULL) IN ('timestamp with time zone', 'timestamp without time zone', 'bigint')
			  AND (a.attname = $3 OR pg_get_expr(d.adbin, d.adrelid) ~* $4)
			ORDER BY a.attname <> $3, a.attnum`, t.schema, t.name, s.recovery.TimestampColumn, insertTimeDefault)
		if err != nil {
			return "", err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", err
		}
		if i == 0 {
			common = names
			continue
		}
		common = slices.DeleteFunc(common, func(n string) bool { return !slices.Contains(names, n) })
	}
	if len(common) == 0 {
		return "", nil
	}
	return common[0], nil
}

// backfillCommand is the command line that backfills this relay's gap,
// with how the rows are chosen (mode: "--after-checkpoint", "--since
// TIME"), and why it works, for a slot-loss error.
func (s *Source) backfillCommand(mode string) string {
	r := s.recovery
	if !r.known {
		// The catalog could not be read: the error says what to choose.
		cmd := strings.Join(nonEmpty("outboxrelay backfill", mode, r.ConfigFlags), " ")
		return fmt.Sprintf("`%s` with the relay's environment, adding --timestamp-column naming the table's insert-time column unless the server has track_commit_timestamp on (else --all in place of %s)", cmd, mode)
	}
	if r.flags == "--all" {
		mode = ""
	}
	cmd := strings.Join(nonEmpty("outboxrelay backfill", mode, r.flags, r.ConfigFlags), " ")
	return fmt.Sprintf("`%s` with the relay's environment (%s)", cmd, r.why)
}

func nonEmpty(words ...string) []string {
	return slices.DeleteFunc(words, func(w string) bool { return w == "" })
}

// shellWord quotes w for a POSIX shell when it needs it.
func shellWord(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// ShellWord quotes w for a POSIX shell when it needs it, as the backfill
// command in a slot-loss error is quoted.
func ShellWord(w string) string { return shellWord(w) }
