package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Cleanup is cdc.cleanup: deleting the outbox rows whose events the
// checkpoint proves are in Kafka, once they are older than a retention.
//
// Which rows are in Kafka: the relay cannot read a row's commit LSN, so
// it proves it with snapshots. Every interval it takes a mark: the oldest
// transaction still running (the xmin of a fresh snapshot, X), then the
// WAL insert position (L), in that order. A transaction whose id is older
// than X had ended when the snapshot was taken, so its commit record was
// already written, before L. Once the checkpoint (what Kafka has
// acknowledged, saved) reaches L, every row inserted by a transaction
// older than X, and committed, is in Kafka: the slot decodes transactions
// in commit order, and the checkpoint moves past a transaction only once
// Kafka has its events. A mark at least Retention old is used; rows whose
// xmin is older than its X are deleted, Batch at a time, each batch in a
// transaction of its own, on a connection of its own, never on the
// replication connection. A row in Kafka but not proven so yet waits for
// a later mark; no row outside the proof is deleted. The relay keeps its
// marks in memory, so a restart starts the proof over: rows wait one
// retention longer, none goes early.
//
// What the proof cannot see: rows committed before the slot existed. With
// cdc.snapshot initial they were published; with never they were not
// (the relay said how many it left), and cleanup deletes them like the
// others once they are older than the retention (docs/operations.md).
type Cleanup struct {
	// Enabled turns cleanup on. Default false.
	Enabled bool `yaml:"enabled" doc:"Delete outbox rows whose events the checkpoint proves are in Kafka, once older than cdc.cleanup.retention, in batches, from a connection of its own; the role needs DELETE on the table (outboxrelay init grants it). Rows deleted cannot be published again by outboxrelay backfill (docs/operations.md)." default:"false"`
	// Retention is how long a row stays after it is proven in Kafka, at
	// least. Default 24h.
	Retention time.Duration `yaml:"retention" doc:"How long rows stay, at least, before cleanup deletes them; counted from a moment after their commit."`
	// BatchSize is the most rows one DELETE removes. Default 1000.
	BatchSize int `yaml:"batch_size" doc:"Most rows one DELETE removes, each batch its own transaction."`
	// Interval is how often cleanup runs. Default 1m.
	Interval time.Duration `yaml:"interval" doc:"How often cleanup runs (and takes the mark that proves what a later run may delete)."`
}

// SetDefaults fills in the defaults.
func (c *Cleanup) SetDefaults() {
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
}

// Validate reports every problem with c at once.
func (c *Cleanup) Validate() error {
	var errs []error
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("cdc.cleanup.retention: %s is negative", c.Retention))
	}
	if c.BatchSize < 0 || c.BatchSize > 100000 {
		errs = append(errs, fmt.Errorf("cdc.cleanup.batch_size: %d is not between 1 and 100000", c.BatchSize))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("cdc.cleanup.interval: %s is negative", c.Interval))
	}
	return errors.Join(errs...)
}

// mark is a proof in the making (see Cleanup): rows of transactions
// older than xmin are in Kafka once the checkpoint reaches lsn.
type mark struct {
	xmin uint32 // the snapshot's xmin, its low 32 bits, as a row's xmin is
	lsn  pglogrepl.LSN
	at   time.Time // the server's clock
}

// maxMarks bounds the marks kept; past it every other one is dropped, so
// that the oldest, the next to be used, stays.
const maxMarks = 256

// maxBatchesPerRound bounds one round's work; the rest waits for the
// next interval.
const maxBatchesPerRound = 100

// cleaner runs the cleanup rounds of one relay.
type cleaner struct {
	src   *Source
	conn  *pgx.Conn
	marks []mark
	// lastErr and lastLog keep a failing cleanup from logging every round.
	lastErr string
	lastLog time.Time
}

// cleanup deletes, every cdc.cleanup.interval until ctx ends, the rows
// proved to be in Kafka (cleaner.round). It is off during a backfill,
// which reads the table and deletes nothing from it: its checkpoint moves
// to a new slot's position, past rows it is still publishing from the
// table.
func (s *Source) cleanup(ctx context.Context) {
	c := &cleaner{src: s}
	defer c.close(ctx)
	t := time.NewTicker(s.cfg.Cleanup.Interval)
	defer t.Stop()
	for {
		c.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *cleaner) close(ctx context.Context) {
	if c.conn != nil {
		pgsql.Close(ctx, c.conn)
		c.conn = nil
	}
}

// round takes a mark and deletes what the oldest usable one proves. A
// failure is logged, when it starts, changes, and once a minute, and the
// next round tries again on a fresh connection: cleanup falling behind
// only lets the table grow for a while.
func (c *cleaner) round(ctx context.Context) {
	s := c.src
	n, err := c.work(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		s.count.cleanupErrs.Add(1)
		c.close(ctx)
		err = classify("clean the outbox table", err)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege {
			err = fmt.Errorf("%w: grant the relay's role DELETE on the outbox table (outboxrelay init does), or turn cdc.cleanup off", err)
		}
		if err.Error() != c.lastErr || time.Since(c.lastLog) >= time.Minute {
			c.lastErr, c.lastLog = err.Error(), time.Now()
			s.log.Error("outbox cleanup failed; the table keeps its rows and cleanup tries again every interval", "err", err, "interval", s.cfg.Cleanup.Interval)
		}
		return
	}
	if c.lastErr != "" {
		c.lastErr = ""
		s.log.Info("outbox cleanup works again")
	}
	if n > 0 {
		s.log.Info("outbox cleanup deleted rows whose events are in Kafka", "rows", n, "cleaned_total", s.count.cleaned.Load())
	}
}

func (c *cleaner) work(ctx context.Context) (int64, error) {
	s := c.src
	if c.conn == nil {
		conn, err := pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network, pgsql.Param("application_name", "outboxrelay-cleanup"))
		if err != nil {
			return 0, err
		}
		c.conn = conn
	}
	now, err := c.takeMark(ctx)
	if err != nil {
		return 0, err
	}
	use, ok := c.usable(s.ConfirmedLSN(), now)
	if !ok {
		return 0, nil
	}
	var total int64
	for i := range s.tables {
		t := &s.tables[i]
		// Deleting by ctid from a bounded subquery keeps each DELETE to
		// BatchSize rows; the subquery's scan stops at the first
		// BatchSize old rows, which sit at the front of an append-mostly
		// heap.
		sql := `DELETE FROM ` + t.ident() + ` WHERE ctid = ANY (ARRAY(SELECT ctid FROM ` + t.ident() +
			` WHERE age(xmin) > age($1::text::xid) LIMIT $2))`
		for range maxBatchesPerRound {
			qctx, cancel := s.cfg.Network.Query(ctx)
			tag, err := c.conn.Exec(qctx, sql, strconv.FormatUint(uint64(use.xmin), 10), s.cfg.Cleanup.BatchSize)
			cancel()
			if err != nil {
				return total, fmt.Errorf("delete from %s: %w", t, err)
			}
			n := tag.RowsAffected()
			total += n
			s.count.cleaned.Add(n)
			if n < int64(s.cfg.Cleanup.BatchSize) {
				break
			}
		}
	}
	return total, nil
}

// takeMark takes a mark (see Cleanup) and returns the server's time.
// The snapshot comes first and the WAL position after, in statements of
// their own, so that the position bounds every commit the snapshot saw.
func (c *cleaner) takeMark(ctx context.Context) (time.Time, error) {
	qctx, cancel := c.src.cfg.Network.Query(ctx)
	defer cancel()
	var xmin string
	var now time.Time
	if err := c.conn.QueryRow(qctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text, clock_timestamp()`).Scan(&xmin, &now); err != nil {
		return time.Time{}, fmt.Errorf("take a snapshot: %w", err)
	}
	var lsnText string
	if err := c.conn.QueryRow(qctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsnText); err != nil {
		return time.Time{}, fmt.Errorf("read the WAL position: %w", err)
	}
	x64, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("snapshot xmin %q: %w", xmin, err)
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return time.Time{}, fmt.Errorf("WAL position %q: %w", lsnText, err)
	}
	m := mark{xmin: uint32(x64), lsn: lsn, at: now}
	// Marks a retention apart are all a round needs; closer ones only
	// make the proof finer.
	spacing := max(c.src.cfg.Cleanup.Interval, c.src.cfg.Cleanup.Retention/(maxMarks/2))
	if n := len(c.marks); n == 0 || m.at.Sub(c.marks[n-1].at) >= spacing-spacing/10 {
		c.marks = append(c.marks, m)
	}
	if len(c.marks) > maxMarks {
		kept := c.marks[:0]
		for i, m := range c.marks {
			if i%2 == 0 || i == len(c.marks)-1 {
				kept = append(kept, m)
			}
		}
		c.marks = kept
	}
	return now, nil
}

// usable returns the newest mark that the checkpoint has reached and
// that is at least a retention old, and forgets the marks before it,
// which it proves no more than.
func (c *cleaner) usable(saved pglogrepl.LSN, now time.Time) (mark, bool) {
	at := -1
	for i, m := range c.marks {
		if m.lsn <= saved && !m.at.After(now.Add(-c.src.cfg.Cleanup.Retention)) {
			at = i
		}
	}
	if at < 0 {
		return mark{}, false
	}
	m := c.marks[at]
	c.marks = append(c.marks[:0], c.marks[at:]...)
	return m, true
}
