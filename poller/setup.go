package poller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Type OIDs the poller treats specially.
const (
	byteaOID       = 17
	int4ArrayOID   = 1007
	int4OID        = 23
	int8OID        = 20
	timestamptzOID = 1184
)

// column is a column of the outbox table.
type column struct {
	name  string
	typ   uint32
	bytea bool // bytea or a domain over it: read as raw bytes
	// text: text, varchar, char, bytea or a domain over one, whose size
	// octet_length gives exactly without reading a TOASTed value.
	text bool
}

// tableMeta is what the claim query needs to know of the table.
type tableMeta struct {
	// cols are the columns that make up an event: every column of the
	// table, in table order, but the poller's published and attempts
	// columns.
	cols []column
	// claimSQL selects the event columns, then ctid, the event time in
	// microseconds and the attempts so far.
	claimSQL string
	// lockSQL finds the buckets of the oldest waiting rows and locks a
	// share of them.
	lockSQL string
	formats []int16
	// timeFromOrder: the event time is the ordering column (a timestamptz)
	// rather than the claim's now().
	timeFromOrder bool
	hasTrigger    bool
}

// inspect checks that the table has what the poller needs and works out
// the claim query. A missing piece is a permanent error that says how to
// add it.
func (s *Source) inspect(ctx context.Context, conn *pgx.Conn) (*tableMeta, error) {
	all, err := s.readColumns(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := s.checkNotPartitioned(ctx, conn); err != nil {
		return nil, err
	}
	if err := s.checkColumns(all); err != nil {
		return nil, err
	}
	if err := s.checkDeadLetterTable(ctx, conn); err != nil {
		return nil, err
	}
	meta := &tableMeta{}
	if meta.hasTrigger, err = s.hasNotifyTrigger(ctx, conn); err != nil {
		return nil, err
	}
	meta.claimSQL = s.claimSQL(meta, all)
	meta.lockSQL = s.lockSQL()
	return meta, nil
}

// readColumns reads the outbox table's columns, in table order.
func (s *Source) readColumns(ctx context.Context, conn *pgx.Conn) ([]column, error) {
	n := &s.n
	rows, err := conn.Query(ctx, `
		SELECT a.attname, a.atttypid, b.oid = 'bytea'::regtype,
			b.oid IN ('bytea'::regtype, 'text'::regtype, 'varchar'::regtype, 'bpchar'::regtype)
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace ns ON ns.oid = c.relnamespace
		JOIN pg_type t ON t.oid = a.atttypid
		CROSS JOIN LATERAL (SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END AS oid) b
		WHERE ns.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, n.schema, n.table)
	if err != nil {
		return nil, classify("read the outbox table's columns", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.typ, &c.bytea, &c.text)
		return c, err
	})
	if err != nil {
		return nil, classify("read the outbox table's columns", err)
	}
	if len(all) == 0 {
		return nil, connector.Permanent(fmt.Errorf("outbox table %s does not exist, or the role cannot see it (create it, or set outbox.table)", n.tbl))
	}
	return all, nil
}

// checkNotPartitioned refuses a partitioned table or one with inheritance
// children. Claims mark rows by ctid, which every partition and
// inheritance child numbers on its own: through the parent, marking one
// row would mark the rows of the same ctid in the others, published or
// not.
func (s *Source) checkNotPartitioned(ctx context.Context, conn *pgx.Conn) error {
	n := &s.n
	var partitioned, children bool
	err := conn.QueryRow(ctx, `
		SELECT c.relkind = 'p', EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)
		FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = $1 AND c.relname = $2`, n.schema, n.table).Scan(&partitioned, &children)
	if err != nil {
		return classify("look up the outbox table", err)
	}
	if partitioned || children {
		return connector.Permanent(fmt.Errorf("outbox table %s is partitioned or has inheritance children, and the poller cannot tell their rows apart (it marks rows by ctid, which each one numbers on its own): use source: cdc, or a table without partitions", n.tbl))
	}
	return nil
}

// checkColumns checks that the table has the columns routing and the
// poller need.
func (s *Source) checkColumns(all []column) error {
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.name
	}
	m := s.cfg.Columns
	need := []string{m.ID, m.AggregateType, m.AggregateID, s.cfg.OrderColumn, s.cfg.AttemptsColumn}
	if s.cfg.Mode == ModeMark {
		need = append(need, s.cfg.PublishedColumn)
	}
	var missing []string
	for _, c := range need {
		if !slices.Contains(names, c) {
			missing = append(missing, fmt.Sprintf("%q", c))
		}
	}
	if len(missing) > 0 {
		return connector.Permanent(fmt.Errorf("outbox table %s has no column %s (it has %s): apply the SQL that `outboxrelay poll-ddl` prints, or map yours under outbox.columns and poll",
			s.n.tbl, strings.Join(missing, ", "), strings.Join(names, ", ")))
	}
	return nil
}

func (s *Source) checkDeadLetterTable(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.n.dl).Scan(&exists); err != nil {
		return classify("look up the dead-letter table", err)
	}
	if !exists {
		return connector.Permanent(fmt.Errorf("dead-letter table %s does not exist: apply the SQL that `outboxrelay poll-ddl` prints, or set poll.dead_letter_table", s.n.dl))
	}
	return nil
}

// hasNotifyTrigger reports whether the table has the enabled trigger that
// wakes the poller on inserts, and says so when it has not.
func (s *Source) hasNotifyTrigger(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var has bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2 AND tgenabled <> 'D')`,
		s.n.tbl, s.n.triggerRaw).Scan(&has)
	if err != nil {
		return false, classify("look up the notify trigger", err)
	}
	if !has {
		s.log.Info("the outbox table has no enabled outboxrelay_notify trigger; polling every interval instead of waking on inserts (`outboxrelay poll-ddl` prints it)",
			"table", s.cfg.Table, "interval", s.cfg.Interval, "max_interval", s.cfg.MaxInterval)
	}
	return has, nil
}

// claimSQL is the claim, given the table's columns; it fills in the event
// columns of meta and the formats they are read in.
//
// The claim: the oldest unpublished rows of the buckets this transaction
// holds, locked until it ends. Only a holder of a bucket's advisory lock
// claims its rows, so no other poller has them locked; a lock on one of
// them belongs to some other session (an operator's UPDATE, say). SKIP
// LOCKED would hand out that aggregate's later events first, so the claim
// waits instead, up to lock_timeout.
//
// The claim returns rows only up to $3 bytes (poll.max_batch_bytes), and
// always the first: the running sum of their sizes runs over the locked
// rows in order, so what it returns is the oldest ones, and the rest stay
// locked, untouched, until the transaction ends. A value is read, and
// leaves TOAST, only when it is returned: octet_length and pg_column_size
// read the size from the TOAST pointer.
//
// Plan: an index scan of the partial index on (order, id) in order,
// filtered by bucket, under LockRows and Limit; then a sort of those rows
// (LockRows hides their order from the planner; it sorts at most
// poll.batch_size tuples, whose large values are TOAST pointers), a
// WindowAgg and a filter.
func (s *Source) claimSQL(meta *tableMeta, all []column) string {
	n := &s.n
	var sel, sizes []string
	for _, c := range all {
		if c.name == s.cfg.AttemptsColumn || (s.cfg.Mode == ModeMark && c.name == s.cfg.PublishedColumn) {
			continue
		}
		if c.name == s.cfg.OrderColumn && c.typ == timestamptzOID {
			meta.timeFromOrder = true
		}
		meta.cols = append(meta.cols, c)
		sel = append(sel, quote(c.name))
		if c.text {
			sizes = append(sizes, "coalesce(octet_length("+quote(c.name)+"), 0)")
		} else {
			// Its stored size, compressed or not: read doesn't trust it.
			sizes = append(sizes, "coalesce(pg_column_size("+quote(c.name)+"), 0)")
		}
		if c.bytea {
			meta.formats = append(meta.formats, 1) // binary: the raw bytes
		} else {
			meta.formats = append(meta.formats, 0) // text, as pgoutput sends
		}
	}
	at := "now()"
	if meta.timeFromOrder {
		at = "coalesce(" + n.order + ", now())"
	}
	sel = append(sel, "ctid::text AS outboxrelay_tid", "(extract(epoch FROM "+at+") * 1000000)::int8 AS outboxrelay_at", n.attempts,
		"("+strings.Join(sizes, " + ")+")::int8 AS outboxrelay_size")
	// Then the running sum of the sizes and the row's place, which read
	// ignores.
	meta.formats = append(meta.formats, 0, 0, 0, 0, 0, 0)
	return fmt.Sprintf(`SELECT * FROM (
		SELECT l.*, sum(l.outboxrelay_size) OVER w AS outboxrelay_run, row_number() OVER w AS outboxrelay_n
		FROM (SELECT %s FROM %s WHERE %s AND %s = ANY($1::int4[]) ORDER BY %s, %s LIMIT $2 FOR UPDATE) l
		WINDOW w AS (ORDER BY l.%s, l.%s ROWS UNBOUNDED PRECEDING)
	) c WHERE c.outboxrelay_run <= $3::int8 OR c.outboxrelay_n = 1 ORDER BY c.%s, c.%s`,
		strings.Join(sel, ", "), n.tbl, n.unpublished, n.bucket, n.order, n.id, n.order, n.id, n.order, n.id)
}

// lockSQL runs before the claim, in one statement: the buckets of the
// oldest waiting rows ($1 of them), oldest first, and the advisory locks
// of as many of those as a share takes (claimer.lockBuckets). It returns
// how many buckets and rows wait, and the buckets now held. Rows that
// other instances hold are among those waiting; their buckets' locks
// fail. pg_try_advisory_xact_lock never waits, so claims never deadlock;
// it runs under the Limit on unnest's rows in order, so it stops at a
// share of locks held, trying the oldest buckets first.
func (s *Source) lockSQL() string {
	n := &s.n
	return fmt.Sprintf(`WITH waiting AS MATERIALIZED (
		SELECT b, row_number() OVER () AS n
		FROM (SELECT %s AS b FROM %s WHERE %s ORDER BY %s, %s LIMIT $1) w
	), found AS (
		SELECT array_agg(b ORDER BY first) AS buckets, count(*) AS nb, (SELECT count(*) FROM waiting) AS nw
		FROM (SELECT b, min(n) AS first FROM waiting GROUP BY b) f
	)
	SELECT nb, nw, ARRAY(
		SELECT b FROM unnest(buckets) AS b WHERE pg_try_advisory_xact_lock($2::int4, b)
		LIMIT ceil(nb::numeric / CASE WHEN nw > $3::int8 THEN $4::int8 ELSE $5::int8 END)::int8
	) FROM found`, n.bucket, n.tbl, n.unpublished, n.order, n.id)
}
