package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/poller"
)

// table is what a replay knows of one outbox table: the columns its
// events are made of, read as the relay's source reads them, and how its
// rows are ordered.
type table struct {
	schema, name string
	// qualified is schema.table, the events' Table, by which the routing
	// of a table that routes its own way is found.
	qualified string
	// ident is the quoted name for SQL.
	ident   string
	columns connector.ColumnMap
	cols    []column
	// idType and the aggregate columns' types are format_type's, for the
	// casts of the parameters compared with them.
	idType string
	// poll is the poller's part; nil for the CDC source's table.
	poll *pollTable
	// ts is the column holding each row's insert time, when one is used.
	ts *timestampColumn
}

// column is one column an event is made of.
type column struct {
	name string
	typ  uint32
	// binary: read in binary format, raw bytes, as the source reads bytea.
	binary bool
}

// pollTable is what the poller adds to a table: its order column, which
// orders the rows, and the column that says whether, and when, the relay
// published a row.
type pollTable struct {
	order, orderType string
	published        string // empty with poll.mode delete
	retention        time.Duration
	deadLetter       string // schema.table of the dead-letter table
}

// permanentStates are the SQLSTATEs a replay cannot get past by trying
// again, with their fix.
var permanentStates = map[string]string{
	pgerrcode.InvalidAuthorizationSpecification: "the role may not connect, or has no pg_hba.conf entry",
	pgerrcode.InvalidPassword:                   "the password was rejected",
	pgerrcode.InvalidCatalogName:                "the database does not exist",
	pgerrcode.InsufficientPrivilege:             "the role needs SELECT on the outbox table (and, for a redrive from the poller's dead-letter table, SELECT, UPDATE and DELETE on that table)",
	pgerrcode.UndefinedTable:                    "the table does not exist",
	pgerrcode.UndefinedColumn:                   "a configured column is not a column of the table",
}

func classify(what string, err error) error { return pgsql.Classify(what, err, permanentStates) }

// readTable reads the catalog entry of the outbox table name. pc is the
// poller's config of the table, nil for the CDC source.
func readTable(ctx context.Context, conn *pgx.Conn, name string, columns connector.ColumnMap, pc *poller.Config) (*table, error) {
	schema, tbl, err := pgsql.SplitTable(name)
	if err != nil {
		return nil, err
	}
	t := &table{schema: schema, name: tbl, qualified: schema + "." + tbl, ident: pgident.Quote(schema, tbl), columns: columns.WithDefaults()}
	if pc != nil {
		t.poll = &pollTable{order: pc.OrderColumn, retention: pc.Retention, deadLetter: deadLetterTable(pc)}
		if pc.Mode == poller.ModeMark {
			t.poll.published = pc.PublishedColumn
		}
	}
	rows, err := conn.Query(ctx, `
		SELECT a.attname, a.atttypid::int8, format_type(a.atttypid, NULL), a.attgenerated <> '', b.oid = 'bytea'::regtype
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace ns ON ns.oid = c.relnamespace
		JOIN pg_type ty ON ty.oid = a.atttypid
		CROSS JOIN LATERAL (SELECT CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE a.atttypid END AS oid) b
		WHERE ns.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, schema, tbl)
	if err != nil {
		return nil, classify("read the outbox table's columns", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c column
		var typ int64
		var typeName string
		var generated, bytea bool
		if err := rows.Scan(&c.name, &typ, &typeName, &generated, &bytea); err != nil {
			return nil, classify("read the outbox table's columns", err)
		}
		c.typ = uint32(typ)
		t.note(c, typeName)
		if t.takes(c, generated, pc) {
			// As each source reads the column: pgoutput and the CDC
			// snapshot send bytea itself in binary, the poller any
			// column whose base type is bytea.
			c.binary = c.typ == byteaOID || pc != nil && bytea
			t.cols = append(t.cols, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify("read the outbox table's columns", err)
	}
	return t, t.check()
}

const byteaOID = 17

// note keeps the types the replay's SQL casts to.
func (t *table) note(c column, typeName string) {
	switch {
	case c.name == t.columns.ID:
		t.idType = typeName
	case t.poll != nil && c.name == t.poll.order:
		t.poll.orderType = typeName
	}
}

// takes says whether c is a column of the events, as the source reads
// them: the CDC source every column pgoutput sends (not a generated one),
// the poller every column but its bookkeeping.
func (t *table) takes(c column, generated bool, pc *poller.Config) bool {
	if pc == nil {
		return !generated
	}
	return c.name != pc.AttemptsColumn && c.name != t.poll.published
}

// check reports what the table lacks for a replay.
func (t *table) check() error {
	if len(t.cols) == 0 {
		return connector.Permanent(fmt.Errorf("outbox table %s does not exist, or the role cannot see it: check outbox.table, or grant SELECT on it", t.ident))
	}
	var errs []error
	if t.idType == "" {
		errs = append(errs, fmt.Errorf("outbox table %s has no column %q (outbox.columns.id)", t.ident, t.columns.ID))
	}
	if t.poll != nil && t.poll.orderType == "" {
		errs = append(errs, fmt.Errorf("outbox table %s has no column %q (poll.order_column), which orders its rows; outboxrelay poll-ddl prints the SQL that adds it", t.ident, t.poll.order))
	}
	if len(errs) > 0 {
		return connector.Permanent(errors.Join(errs...))
	}
	return nil
}

// deadLetterTable is the poller's dead-letter table of pc's outbox table,
// schema.table.
func deadLetterTable(pc *poller.Config) string {
	if strings.Contains(pc.DeadLetterTable, ".") {
		return pc.DeadLetterTable
	}
	schema, _, _ := pgsql.SplitTable(pc.Table)
	return schema + "." + pc.DeadLetterTable
}

// timestampColumn is a column the application sets to each row's insert
// time.
type timestampColumn struct {
	name string
	// bigint: milliseconds since the epoch; else a timestamp.
	bigint bool
}

// readTimestampColumn looks up column col of t and checks its type.
func readTimestampColumn(ctx context.Context, conn *pgx.Conn, t *table, col string) (*timestampColumn, error) {
	tc, found, err := pgsql.ReadTimeColumn(ctx, conn, t.schema, t.name, col)
	switch {
	case err != nil:
		return nil, classify("read the timestamp column's type", err)
	case !found:
		return nil, connector.Permanent(fmt.Errorf("outbox table %s has no column %q to tell when its rows were inserted (--timestamp-column, default routing.timestamp_column)", t.ident, col))
	case !tc.Usable():
		return nil, connector.Permanent(fmt.Errorf("column %q of %s is %s; a replay tells insert times by a timestamptz, timestamp or bigint (milliseconds since the epoch) column", col, t.ident, tc.Type))
	}
	return &timestampColumn{name: col, bigint: tc.Millis()}, nil
}

// expr is the column as a timestamptz, for SQL. A timestamp without time
// zone is read in the session's TimeZone, as now() wrote it.
func (c *timestampColumn) expr() string {
	q := pgident.Quote(c.name)
	if c.bigint {
		return "to_timestamp(" + q + " / 1000.0)"
	}
	return q + "::timestamptz"
}
