package cdc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// A slot captures only what commits after it exists. With cdc.snapshot
// initial, the source creates its slot on the replication connection with
// an exported snapshot, reads the table in that snapshot, hands those rows
// on, and only then streams from the slot's consistent point: a row is
// either visible in the snapshot or committed after the consistent point,
// never both, never neither (Debezium's snapshot.mode initial).
//
// Until Kafka has acknowledged the last row of the snapshot, the checkpoint
// says so (SnapshotPending) and stays at the consistent point: a restart
// then reads the table again, at its current state, before streaming from
// the slot, so a row is published at least once, some twice (with their id
// headers), and none lost.

// Snapshot is what the source does with the rows already in the table
// when it creates its slot (Config.Snapshot).
type Snapshot string

// What Snapshot may be.
const (
	SnapshotNever   Snapshot = "never"
	SnapshotInitial Snapshot = "initial"
)

// Values lists every Snapshot.
func (Snapshot) Values() []string { return []string{string(SnapshotNever), string(SnapshotInitial)} }

// snapshotJob is a snapshot to publish before streaming: an exported one
// (name), or, when name is empty, the tables as they are now. A
// backfill's (backfill.go) reads only the rows its filters choose.
type snapshotJob struct {
	name     string
	filters  map[table]rowFilter
	backfill bool
}

// createSlotCommand is the replication command that creates the slot with
// an exported snapshot. The option list came with PostgreSQL 15, FAILOVER
// with 17; before 15 the snapshot is a bare keyword.
func createSlotCommand(slot string, serverVersion int, failover bool) string {
	if serverVersion < 150000 {
		return fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput EXPORT_SNAPSHOT", pgx.Identifier{slot}.Sanitize())
	}
	opts := "SNAPSHOT 'export'"
	if failover && serverVersion >= 170000 {
		opts += ", FAILOVER"
	}
	return fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (%s)", pgx.Identifier{slot}.Sanitize(), opts)
}

// createExported creates the slot on the replication connection conn,
// exporting the snapshot it starts from, which stays usable until conn
// runs another command.
func (s *Source) createExported(ctx context.Context, conn *pgconn.PgConn) (pglogrepl.LSN, string, error) {
	cmd := createSlotCommand(s.cfg.Slot, serverVersion(conn), s.failover(serverVersion(conn)))
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, cmd))
	if err != nil {
		return 0, "", err
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, "", fmt.Errorf("create the replication slot: consistent point %q: %w", res.ConsistentPoint, err)
	}
	s.log.Info("created replication slot with a snapshot of the outbox table",
		"slot", s.cfg.Slot, "lsn", lsn.String(), "snapshot", res.SnapshotName)
	return lsn, res.SnapshotName, nil
}

// serverVersion is server_version_num as the server reported it when the
// connection started, or 0.
func serverVersion(conn *pgconn.PgConn) int {
	v := conn.ParameterStatus("server_version")
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, " ")
	var ma, mi int
	if _, err := fmt.Sscan(major, &ma); err != nil {
		return 0
	}
	_, _ = fmt.Sscan(minor, &mi)
	if ma >= 10 {
		return ma*10000 + mi
	}
	return ma*10000 + mi*100
}

// publishSnapshot reads every row of the outbox table visible in the
// snapshot (or now, for a snapshotJob without a name) and hands them to
// out in batches. Within the snapshot the rows go oldest transaction
// first, and within a transaction in the order it wrote them: the order
// of transaction ids is commit order for an aggregate whose transactions
// do not overlap, which is how an outbox is written. The last batch's
// Done ends the pending snapshot.
func (s *Source) publishSnapshot(ctx context.Context, job snapshotJob, at pglogrepl.LSN, out chan<- connector.Batch) error {
	conn, err := pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network)
	if err != nil {
		return classify("connect to PostgreSQL for the snapshot", err)
	}
	defer pgsql.Close(ctx, conn)
	tx, now, err := s.beginSnapshot(ctx, conn, job)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	what := "publishing the rows already in the outbox tables (cdc.snapshot initial)"
	if job.backfill {
		what = "backfill: publishing the chosen outbox rows"
	}
	s.log.Info(what, "slot", s.cfg.Slot, "tables", s.tableList(), "exported_snapshot", job.name != "")
	sn := &snapshotSender{src: s, job: job, at: at, out: out}
	s.pos.update(func(p *positions) { p.startHanding() })
	for _, t := range s.tables {
		origin := "snapshot of " + t.String()
		if job.backfill {
			origin = "backfill of " + t.String()
		}
		f := job.filters[t]
		if err := s.readTable(ctx, tx, t, f, func(row []connector.Column, repeat int) error {
			return sn.add(ctx, t, f, row, repeat, now, origin)
		}); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return classify("end the snapshot transaction", err)
	}
	// The last batch, even an empty one.
	return sn.send(ctx, true)
}

// beginSnapshot begins the read-only transaction the snapshot is read in,
// in the slot's exported snapshot when job names one, and returns it with
// its start time, which the snapshot's events carry as their commit time.
func (s *Source) beginSnapshot(ctx context.Context, conn *pgx.Conn, job snapshotJob) (pgx.Tx, time.Time, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, time.Time{}, classify("begin the snapshot transaction", err)
	}
	fail := func(what string, err error) (pgx.Tx, time.Time, error) {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, time.Time{}, classify(what, err)
	}
	if job.name != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(job.name)); err != nil {
			return fail("use the slot's snapshot", err)
		}
	}
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT transaction_timestamp()").Scan(&now); err != nil {
		return fail("begin the snapshot transaction", err)
	}
	return tx, now, nil
}

// snapshotSender gathers the snapshot's rows into batches and hands them
// on. Only publishSnapshot's goroutine touches it.
type snapshotSender struct {
	src *Source
	job snapshotJob
	// at is the slot's consistent point, where every checkpoint of the
	// snapshot holds.
	at    pglogrepl.LSN
	out   chan<- connector.Batch
	batch []connector.Event
	bytes int
	total int
	// repeats are a backfill's rows that Kafka may have already, by why
	// they were chosen, to report.
	repeats []BackfillRepeats
}

// add adds a row of t, chosen by f, to the batch, and hands the batch on
// when it is full.
func (sn *snapshotSender) add(ctx context.Context, t table, f rowFilter, row []connector.Column, repeat int, now time.Time, origin string) error {
	cfg := &sn.src.cfg
	if repeat > 0 && repeat <= len(f.reasons) {
		sn.repeats = countRepeat(sn.repeats, f.reasons[repeat-1])
	}
	e := t.columns.NewEvent(row, now, origin)
	e.Table = t.qualified
	sn.batch = append(sn.batch, e)
	sn.bytes += eventBytes(&e)
	sn.total++
	if len(sn.batch) >= cfg.MaxBatchEvents || sn.bytes >= cfg.MaxBatchBytes {
		return sn.send(ctx, false)
	}
	return nil
}

// send hands on the batch. With exactly once every batch may end a Kafka
// transaction, with a checkpoint at the consistent point that says
// whether the snapshot is still under way; the last one's Done, after
// every other snapshot batch's, says Kafka has them all.
func (sn *snapshotSender) send(ctx context.Context, last bool) error {
	s := sn.src
	n := int64(len(sn.batch))
	var txn *ackedTxn
	var handed int64
	s.pos.update(func(p *positions) { txn, handed = p.markAt(sn.at), p.handOn(n) })
	mark, done := s.ckpt.write(txn, handed, n, !last)
	if last {
		done = sn.lastDone(done)
	}
	b := connector.Batch{Events: sn.batch, Done: done, Checkpoint: mark}
	sn.batch, sn.bytes = nil, 0
	select {
	case sn.out <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lastDone is the last batch's Done: inner, then, once Kafka has every
// row, the end of the pending snapshot, said in the log, and a backfill's
// result.
func (sn *snapshotSender) lastDone(inner func(error)) func(error) {
	s, rows, repeats := sn.src, sn.total, sn.repeats
	return func(err error) {
		inner(err)
		if err != nil {
			return
		}
		s.pos.update(func(p *positions) { p.snapshotPending = false })
		if !sn.job.backfill {
			s.log.Info("snapshot published: Kafka acknowledged every row already in the outbox table", "slot", s.cfg.Slot, "rows", rows)
			return
		}
		attrs := []any{"slot", s.cfg.Slot, "rows", rows}
		if res := (BackfillResult{Repeats: repeats}); !s.backfill.All {
			attrs = append(attrs, "repeated_rows", res.RepeatedRows(), "repeated_why", res.RepeatsWords())
		}
		s.log.Info("backfill published: Kafka acknowledged every row chosen", attrs...)
		s.backfill.done(rows, repeats)
	}
}

// countRepeat counts one more row chosen for why.
func countRepeat(repeats []BackfillRepeats, why string) []BackfillRepeats {
	for i := range repeats {
		if repeats[i].Why == why {
			repeats[i].Rows++
			return repeats
		}
	}
	return append(repeats, BackfillRepeats{Rows: 1, Why: why})
}

// readTable reads the rows of t that f chooses, oldest transaction first,
// and hands each to row, with f.repeat's value for it (0 without one). A
// table's rows go in one query; the tables one after the other, so events
// of one aggregate in two tables are in order within each table only.
func (s *Source) readTable(ctx context.Context, tx pgx.Tx, t table, f rowFilter, row func(r []connector.Column, repeat int) error) error {
	cols, err := snapshotColumns(ctx, tx, t.schema, t.name)
	if err != nil {
		return err
	}
	names := make([]string, len(cols))
	formats := make([]int16, len(cols))
	for i, c := range cols {
		names[i] = pgx.Identifier{c.Name}.Sanitize()
		if c.Type == byteaOID {
			formats[i] = 1 // raw bytes, as connector.Column holds bytea
		}
	}
	where := ""
	if f.where != "" {
		where = " WHERE " + f.where
	}
	if f.repeat != "" {
		names = append(names, "("+f.repeat+")::int4")
		formats = append(formats, 0)
	}
	// age(xmin) orders by transaction id across wraparound; a frozen
	// row's is the largest, so frozen (old) rows come first.
	q := fmt.Sprintf("SELECT %s FROM %s%s ORDER BY age(xmin) DESC, ctid", strings.Join(names, ", "), t.ident(), where)
	rr := tx.Conn().PgConn().ExecParams(ctx, q, f.args, nil, nil, formats)
	for rr.NextRow() {
		vals := rr.Values()
		r := make([]connector.Column, len(cols))
		for i, c := range cols {
			r[i] = connector.Column{Name: c.Name, Type: c.Type, Null: vals[i] == nil}
			if vals[i] != nil {
				// A copy that stays non-nil when empty: an empty text or
				// bytea is a value, and only NULL is nil.
				r[i].Value = append([]byte{}, vals[i]...)
			}
		}
		repeat := 0
		if f.repeat != "" && vals[len(cols)] != nil {
			repeat, _ = strconv.Atoi(string(vals[len(cols)]))
		}
		if err := row(r, repeat); err != nil {
			rr.Close()
			return err
		}
	}
	if _, err := rr.Close(); err != nil {
		return classify(fmt.Sprintf("read outbox table %s for the snapshot", t), err)
	}
	return nil
}

const byteaOID = 17

// snapshotColumns lists the table's columns as pgoutput sends them: every
// column not dropped and not generated, in table order.
func snapshotColumns(ctx context.Context, tx pgx.Tx, schema, table string) ([]connector.Column, error) {
	rows, err := tx.Query(ctx, `
		SELECT a.attname, a.atttypid::int8
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, schema, table)
	if err != nil {
		return nil, classify("read the outbox table's columns", err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (connector.Column, error) {
		var c connector.Column
		var typ int64
		err := r.Scan(&c.Name, &typ)
		c.Type = uint32(typ)
		return c, err
	})
	if err != nil {
		return nil, classify("read the outbox table's columns", err)
	}
	return cols, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// failover says whether to create the slot as a failover slot, which a
// promoted standby keeps (PostgreSQL 17 and later; cdc.failover_slot). A
// standby makes no failover slot of its own (0A000, "cannot enable
// failover for a replication slot created on the standby").
func (s *Source) failover(serverVersion int) bool {
	if serverVersion < 170000 || s.server.onHotStandby {
		return false
	}
	return s.cfg.FailoverSlot == nil || *s.cfg.FailoverSlot
}

// createSlotSQL is the SQL that creates the slot without a snapshot, and
// its arguments after the slot's name.
func createSlotSQL(serverVersion int, failover bool) string {
	if failover && serverVersion >= 170000 {
		// slot_name, plugin, temporary, twophase, failover
		return `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`
	}
	return `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`
}
