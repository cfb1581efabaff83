package replay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// A replay reads a table a page at a time, each page one plain SELECT in
// a transaction of its own, taking no lock beyond the one every reader
// takes: the application's inserts, the relay's marks and cleanup's
// deletes never wait for it. Pages follow each other by keyset, the last
// row's key, so each one's cost is bounded by the page (and, the keys
// being computed, a scan of the table) and memory by the page.
//
// The key is the order the relay's source publishes in. For the CDC
// source: the row's transaction, oldest first, as the source's snapshot
// orders them (for an aggregate whose transactions do not overlap, that
// is commit order), then its place in the table, the order the
// transaction wrote its rows in. The transaction id is made 64 bits wide
// against the server's next one, so that it compares across wraparound
// and stays the same from page to page. For the poller: its order column,
// then the id, as it claims them.

// fullXID is the row's xmin with its epoch, given s.f, the server's next
// transaction id, 64 bits wide.
const fullXID = `(s.f - ((s.f % 4294967296 - xmin::text::int8) % 4294967296 + 4294967296) % 4294967296)`

// withNextXID puts s.f in reach of a query.
const withNextXID = `WITH s AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS f) `

// reader reads the rows of one table a selection chooses.
type reader struct {
	t   *table
	ts  timeSource
	sel Selection
	// until is the range's end, the replay's start when none was given.
	until time.Time
	// bound keeps out what committed after the replay started: for the
	// CDC source the next transaction id then, for the poller the largest
	// order value then ("" when the table was empty).
	bound string
}

// params are a query's parameters, in text form.
type params struct{ args [][]byte }

// add adds v, returning its placeholder cast to typ.
func (p *params) add(v, typ string) string {
	p.args = append(p.args, []byte(v))
	return fmt.Sprintf("$%d::%s", len(p.args), typ)
}

// timeExpr is when a row was committed, as far as the replay can tell.
func (r *reader) timeExpr() string {
	switch r.ts {
	case timeCommit:
		return "pg_xact_commit_timestamp(xmin)"
	case timeCommitOrColumn:
		return "coalesce(pg_xact_commit_timestamp(xmin), " + r.t.ts.expr() + ")"
	case timeColumn:
		return r.t.ts.expr()
	case timePublished:
		return pgident.Quote(r.t.poll.published)
	}
	return "NULL::timestamptz"
}

// keys are the two parts of the order key.
func (r *reader) keys() (string, string) {
	if r.t.poll != nil {
		return pgident.Quote(r.t.poll.order), pgident.Quote(r.t.columns.ID)
	}
	return fullXID, "ctid"
}

// from is the query's FROM and, for the CDC source, the next transaction
// id its key needs.
func (r *reader) from() (with, from string) {
	if r.t.poll != nil {
		return "", r.t.ident
	}
	return withNextXID, r.t.ident + ", s"
}

// where is the selection's condition: the rows chosen, with ids when the
// selection is by id (a chunk of them).
func (r *reader) where(p *params, ids []string) string {
	var conds []string
	if r.t.poll != nil && r.t.poll.published != "" {
		// A row the poller has not published yet it publishes anyway.
		conds = append(conds, pgident.Quote(r.t.poll.published)+" IS NOT NULL")
	}
	if ids != nil {
		conds = append(conds, pgident.Quote(r.t.columns.ID)+" = ANY("+p.add(textArray(ids), r.t.idType+"[]")+")")
		return strings.Join(conds, " AND ")
	}
	switch r.bound {
	case "":
	case emptyBound:
		conds = append(conds, "false")
	default:
		k1, _ := r.keys()
		if r.t.poll != nil {
			conds = append(conds, k1+" <= "+p.add(r.bound, r.t.poll.orderType))
		} else {
			conds = append(conds, k1+" < "+p.add(r.bound, "int8"))
		}
	}
	if r.sel.byRange() {
		te := r.timeExpr()
		conds = append(conds, te+" >= "+p.add(r.sel.Since.Format(time.RFC3339Nano), "timestamptz"),
			te+" < "+p.add(r.until.Format(time.RFC3339Nano), "timestamptz"))
	}
	if r.sel.byAggregate() {
		conds = append(conds, pgident.Quote(r.t.columns.AggregateType)+"::text = "+p.add(r.sel.AggregateType, "text"),
			pgident.Quote(r.t.columns.AggregateID)+"::text = "+p.add(r.sel.AggregateID, "text"))
	}
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// textArray is ids as the text of an array literal.
func textArray(ids []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(id))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// page reads up to limit rows after cursor (nil: from the first), or with
// ids, the rows of those ids, in order.
func (r *reader) page(ctx context.Context, conn *pgx.Conn, cursor []string, ids []string, limit int) ([]row, error) {
	p := &params{}
	with, from := r.from()
	k1, k2 := r.keys()
	cond := r.where(p, ids)
	if cursor != nil && ids == nil {
		typ1, typ2 := "int8", "tid"
		if r.t.poll != nil {
			typ1, typ2 = r.t.poll.orderType, r.t.idType
		}
		cond += fmt.Sprintf(" AND (%s, %s) > (%s, %s)", k1, k2, p.add(cursor[0], typ1), p.add(cursor[1], typ2))
	}
	names := make([]string, 0, len(r.t.cols)+3)
	formats := make([]int16, 0, len(r.t.cols)+3)
	for _, c := range r.t.cols {
		names = append(names, pgident.Quote(c.name))
		formats = append(formats, c.format())
	}
	// Named apart: ORDER BY takes a bare name for an output column first,
	// and the key's text would then sort as text.
	names = append(names, k1+"::text AS outboxrelay_k1", k2+"::text AS outboxrelay_k2", "(extract(epoch FROM coalesce("+r.timeExpr()+", now())) * 1000000)::int8 AS outboxrelay_at")
	formats = append(formats, 0, 0, 0)
	q := fmt.Sprintf("%sSELECT %s FROM %s WHERE %s ORDER BY %s, %s LIMIT %d", with, strings.Join(names, ", "), from, cond, k1, k2, limit)
	rr := conn.PgConn().ExecParams(ctx, q, p.args, nil, nil, formats)
	var out []row
	for rr.NextRow() {
		out = append(out, r.row(rr.Values()))
	}
	if _, err := rr.Close(); err != nil {
		return nil, classify(fmt.Sprintf("read outbox table %s", r.t.ident), err)
	}
	return out, nil
}

// format is the column's result format: binary (the raw bytes) where the
// source reads it so, else text, as pgoutput sends it.
func (c column) format() int16 {
	if c.binary {
		return 1
	}
	return 0
}

// row is an outbox row read for a replay: its event, and its key.
type row struct {
	e   connector.Event
	key []string
	// onlyNullKey: nothing is wrong with it but a NULL aggregate id,
	// which a router that takes NULL keys routes.
	onlyNullKey bool
}

// row makes the values of a row of the page query into a row.
func (r *reader) row(vals [][]byte) row {
	n := len(r.t.cols)
	cols := make([]connector.Column, n)
	var idNull, typeNull bool
	for i, c := range r.t.cols {
		cols[i] = connector.Column{Name: c.name, Type: c.typ, Null: vals[i] == nil}
		if vals[i] != nil {
			// A copy that stays non-nil when empty: only NULL is nil.
			cols[i].Value = append([]byte{}, vals[i]...)
		}
		idNull = idNull || c.name == r.t.columns.ID && vals[i] == nil
		typeNull = typeNull || c.name == r.t.columns.AggregateType && vals[i] == nil
	}
	at := time.Now()
	if us, err := strconv.ParseInt(string(vals[n+2]), 10, 64); err == nil {
		at = time.UnixMicro(us)
	}
	e := r.t.columns.NewEvent(cols, at, "replay of "+r.t.qualified)
	e.Table = r.t.qualified
	return row{e: e, key: []string{string(vals[n]), string(vals[n+1])}, onlyNullKey: e.AggregateIDNull && !idNull && !typeNull}
}

// count counts the rows chosen (of ids, when given).
func (r *reader) count(ctx context.Context, conn *pgx.Conn, ids []string) (int64, error) {
	p := &params{}
	with, from := r.from()
	var n int64
	err := queryText(ctx, conn, fmt.Sprintf("%sSELECT count(*) FROM %s WHERE %s", with, from, r.where(p, ids)), p.args, func(vals [][]byte) {
		n, _ = strconv.ParseInt(string(vals[0]), 10, 64)
	})
	if err != nil {
		return 0, classify(fmt.Sprintf("count the rows chosen in %s", r.t.ident), err)
	}
	return n, nil
}

// foundIDs marks in found those of ids the table holds (as the table
// writes them).
func (r *reader) foundIDs(ctx context.Context, conn *pgx.Conn, ids []string, found map[string]bool) error {
	p := &params{}
	err := queryText(ctx, conn, fmt.Sprintf("SELECT %s::text FROM %s WHERE %s", pgident.Quote(r.t.columns.ID), r.t.ident, r.where(p, ids)), p.args, func(vals [][]byte) {
		found[string(vals[0])] = true
	})
	if err != nil {
		return classify(fmt.Sprintf("look the ids up in %s", r.t.ident), err)
	}
	return nil
}

// queryText runs q with parameters in text form, each cast in q to its
// type, and hands each row's values, in text form, to each.
func queryText(ctx context.Context, conn *pgx.Conn, q string, args [][]byte, each func(vals [][]byte)) error {
	rr := conn.PgConn().ExecParams(ctx, q, args, nil, nil, nil)
	for rr.NextRow() {
		each(rr.Values())
	}
	_, err := rr.Close()
	return err
}

// readBound reads the bound that keeps out what commits after now.
func (r *reader) readBound(ctx context.Context, conn *pgx.Conn) error {
	q := "SELECT pg_snapshot_xmax(pg_current_snapshot())::text"
	if r.t.poll != nil {
		q = fmt.Sprintf("SELECT max(%s)::text FROM %s", pgident.Quote(r.t.poll.order), r.t.ident)
	}
	var bound *string
	if err := conn.QueryRow(ctx, q).Scan(&bound); err != nil {
		return classify(fmt.Sprintf("read where %s ends now", r.t.ident), err)
	}
	if bound == nil {
		// An empty table: nothing before the replay's start.
		r.bound = emptyBound
		return nil
	}
	r.bound = *bound
	return nil
}

// emptyBound is the bound of a table that held nothing when the replay
// started.
const emptyBound = "empty"
