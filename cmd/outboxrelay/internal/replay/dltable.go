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
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// The poller without a dead letter topic moves an event it can never
// publish into its dead-letter table (poller/ddl.go), the whole row as
// jsonb in outbox_row, with the reason. A redrive reads the row from
// there, sends it on, and once Kafka has it deletes it from the table; one
// that still cannot be published keeps its row, with the new reason.

// dlRow is the SQL that makes a dead-letter table row's outbox_row into a
// row of the outbox table d is the dead letter of. A row the poller kept
// as the jsonb string of its JSON text (a json column holding \u0000)
// reads through json, which keeps such a text.
const dlRow = `json_populate_record(NULL::%s, CASE WHEN jsonb_typeof(d.outbox_row) = 'string' THEN (d.outbox_row #>> '{}')::json ELSE d.outbox_row::json END) r`

// fromTables redrives each poller table's dead-letter table.
func (r *redrive) fromTables(ctx, work context.Context) error {
	var names []string
	for _, rd := range r.readers {
		names = append(names, rd.t.poll.deadLetter)
	}
	r.res.Source = "dead-letter table " + strings.Join(names, ", ")
	for _, rd := range r.readers {
		if err := r.fromTable(ctx, work, rd); err != nil || ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// fromTable redrives the dead-letter table of rd's outbox table, a page
// at a time in the order the rows died.
func (r *redrive) fromTable(ctx, work context.Context, rd *reader) error {
	after := []string{"-infinity", ""}
	for ctx.Err() == nil {
		page, rows, last, err := r.deadRows(work, rd, after)
		if err != nil || last == nil {
			return err
		}
		after = last
		var batch []*DeadLetter
		for _, d := range page {
			if r.Filter.takes(d) {
				batch = append(batch, d)
			}
		}
		if len(batch) == 0 {
			continue
		}
		outs, err := r.route(work, batch, rows, "")
		if err != nil {
			return err
		}
		msgs, refuse := r.messages(outs, "")
		if err := r.pub.send(work, msgs, func() *connector.Message { return nil }, refuse); err != nil {
			return fmt.Errorf("redrive %s: %w", r.res.ID, err)
		}
		if err := r.settleRows(work, rd, outs); err != nil {
			return err
		}
		r.count(outs)
	}
	return nil
}

// deadRows reads the next page of the dead-letter table after the row at
// after (dead_at, event_id), with each row's event made from its
// outbox_row, by event id; last is the page's last key, nil at the end.
func (r *redrive) deadRows(ctx context.Context, rd *reader, after []string) ([]*DeadLetter, map[string]*row, []string, error) {
	t := rd.t
	schema, name, err := pgsql.SplitTable(t.poll.deadLetter)
	if err != nil {
		return nil, nil, nil, err
	}
	p := &params{}
	cols := make([]string, 0, len(t.cols)+5)
	formats := make([]int16, 0, len(t.cols)+5)
	for _, c := range t.cols {
		cols = append(cols, "r."+pgident.Quote(c.name))
		formats = append(formats, c.format())
	}
	// Laid out as the replay's page query is, so that reader.row reads it.
	cols = append(cols, "d.dead_at::text AS outboxrelay_k1", "d.event_id AS outboxrelay_k2", "(extract(epoch FROM d.dead_at) * 1000000)::int8 AS outboxrelay_at",
		"d.ctid::text AS outboxrelay_tid", "d.reason AS outboxrelay_reason")
	formats = append(formats, 0, 0, 0, 0, 0)
	cond := fmt.Sprintf("(d.dead_at, d.event_id) > (%s, %s)", p.add(after[0], "timestamptz"), p.add(after[1], "text"))
	if len(r.Filter.IDs) > 0 {
		cond += " AND d.event_id = ANY(" + p.add(textArray(r.Filter.IDs), "text[]") + ")"
	}
	q := fmt.Sprintf("SELECT %s FROM %s d, "+dlRow+" WHERE d.event_id IS NOT NULL AND %s ORDER BY d.dead_at, d.event_id LIMIT %d",
		strings.Join(cols, ", "), pgident.Quote(schema, name), t.ident, cond, r.BatchSize)
	rr := r.conn.PgConn().ExecParams(ctx, q, p.args, nil, nil, formats)
	var page []*DeadLetter
	rows := map[string]*row{}
	var last []string
	n := len(t.cols)
	for rr.NextRow() {
		vals := rr.Values()
		rw := rd.row(vals)
		rw.e.Origin = "dead-letter table " + t.poll.deadLetter
		d := &DeadLetter{Where: "table " + t.poll.deadLetter, EventID: string(vals[n+1]), Reason: string(vals[n+4]),
			Time: rw.e.CommitTime, Key: []byte(rw.e.AggregateID), Value: rw.e.Payload, ctid: string(vals[n+3])}
		rw.e.CommitTime = time.Now()
		page = append(page, d)
		rows[d.EventID] = &rw
		last = []string{string(vals[n]), string(vals[n+1])}
	}
	if _, err := rr.Close(); err != nil {
		return nil, nil, nil, classify("read the dead-letter table "+t.poll.deadLetter, err)
	}
	return page, rows, last, nil
}

// settleRows deletes the rows Kafka now has from the dead-letter table,
// and gives those that stay their new reason, in one transaction.
func (r *redrive) settleRows(ctx context.Context, rd *reader, outs []*outcome) error {
	dl := rd.t.poll.deadLetter
	schema, name, _ := pgsql.SplitTable(dl)
	ident := pgident.Quote(schema, name)
	return pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		var went []string
		for _, o := range outs {
			switch {
			case o.stay == "":
				went = append(went, o.d.ctid)
			case o.renewed:
				if _, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET reason = $2 WHERE ctid = $1::text::tid", ident), o.d.ctid, tableReason(o.stay)); err != nil {
					return classify("record the new reason in "+dl, err)
				}
			}
		}
		if len(went) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE ctid = ANY($1::text[]::tid[])", ident), went); err != nil {
			return classify("delete the rows sent on from "+dl, err)
		}
		return nil
	})
}

// tableReason is a reason as the dead-letter table keeps it, as the poller
// writes it: valid UTF-8, no NUL, at most 4 KiB.
func tableReason(reason string) string {
	return connector.Shorten(strings.ReplaceAll(strings.ToValidUTF8(reason, "\ufffd"), "\x00", ""), 4096)
}

// listTable calls fn with each row of the dead-letter table of rd's
// outbox table, in the order they died.
func listTable(ctx context.Context, conn *pgx.Conn, rd *reader, f Filter, fn func(*DeadLetter) error) error {
	dl := rd.t.poll.deadLetter
	schema, name, err := pgsql.SplitTable(dl)
	if err != nil {
		return err
	}
	p := &params{}
	cond := "true"
	if len(f.IDs) > 0 {
		cond = "event_id = ANY(" + p.add(textArray(f.IDs), "text[]") + ")"
	}
	q := fmt.Sprintf(`SELECT coalesce(event_id, ''), coalesce(aggregatetype, ''), coalesce(aggregateid, ''), reason, attempts::text,
		(extract(epoch FROM dead_at) * 1000000)::int8, outbox_row::text FROM %s WHERE %s ORDER BY dead_at, event_id`, pgident.Quote(schema, name), cond)
	rr := conn.PgConn().ExecParams(ctx, q, p.args, nil, nil, nil)
	for rr.NextRow() {
		v := rr.Values()
		us, _ := strconv.ParseInt(string(v[5]), 10, 64)
		d := &DeadLetter{Where: "table " + dl, EventID: string(v[0]), Reason: string(v[3]), Topic: topicInReason(string(v[3])), Time: time.UnixMicro(us),
			Key: append([]byte{}, v[2]...), Value: append([]byte{}, v[6]...),
			Headers: []connector.Header{{Key: "aggregatetype", Value: append([]byte{}, v[1]...)}, {Key: "attempts", Value: append([]byte{}, v[4]...)}}}
		if !f.takes(d) {
			continue
		}
		if err := fn(d); err != nil {
			rr.Close()
			return err
		}
	}
	if _, err := rr.Close(); err != nil {
		return classify("read the dead-letter table "+dl, err)
	}
	return nil
}
