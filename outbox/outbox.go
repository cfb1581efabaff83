package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// Event is one outbox event. AggregateType names the topic (the relay's
// routing.topic_prefix before it), AggregateID is the record key, which
// keeps the events of one aggregate in order on one partition.
type Event struct {
	// ID is the event's id, a UUID in text form; empty, [Writer.Write]
	// gives it a new UUIDv7 ([NewID]).
	ID            string
	AggregateType string
	AggregateID   string
	Type          string
	// Payload is the record's value, a JSON document (a jsonb column);
	// nil writes NULL.
	Payload []byte
	// Headers go into the headers column ([HeadersColumn]), which the
	// relay turns into the record's headers when its
	// routing.headers_column names it. The trace context of the ctx
	// given to Write is added as traceparent and tracestate, replacing
	// entries of those names. A writer to a table without a headers
	// column refuses an event with Headers.
	Headers map[string]string
}

// NewID returns a new UUIDv7 in text form: ids that sort in the order
// they were made, which keeps the outbox table's primary key index
// appending at its end.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// DefaultTable is the table [Write] writes to, outboxrelay's default
// outbox.table.
const DefaultTable = "public.outbox"

// Writer writes events to one outbox table, or as logical decoding
// messages of one prefix. It holds no connection and may be used by many
// goroutines at once.
type Writer struct {
	table      string // schema.table as given
	quoted     string // the table as an SQL identifier
	headers    string // the headers column, "" for none
	prefix     string
	messages   bool
	propagator propagation.TextMapPropagator
}

// Option configures a [Writer].
type Option func(*Writer) error

// Table writes events to the table name, schema.table or table (in the
// search path), instead of [DefaultTable].
func Table(name string) Option {
	return func(w *Writer) error {
		parts := strings.Split(name, ".")
		if len(parts) > 2 {
			return fmt.Errorf("outbox table %q has %d dots; write schema.table", name, len(parts)-1)
		}
		for _, p := range parts {
			if p == "" || strings.ContainsRune(p, 0) {
				return fmt.Errorf("outbox table %q is not a table name; write schema.table", name)
			}
		}
		w.table, w.quoted, w.messages = name, pgx.Identifier(parts).Sanitize(), false
		return nil
	}
}

// Messages writes each event as a transactional logical decoding message,
// pg_logical_emit_message(true, prefix, content), instead of a row: the
// event is in the WAL, committed with the transaction, and there is no
// table to clean. content is the event as a JSON object (see
// docs/application.md):
//
//	{"id": "…", "aggregatetype": "…", "aggregateid": "…", "type": "…",
//	 "payload": <the payload's JSON, or null>, "headers": {"…": "…"}}
//
// headers is left out when there are none. Only the relay's cdc source
// reads logical decoding messages; it needs the prefix configured.
func Messages(prefix string) Option {
	return func(w *Writer) error {
		if prefix == "" || strings.ContainsRune(prefix, 0) {
			return fmt.Errorf("logical message prefix %q is empty or holds a NUL character; name the prefix the relay reads", prefix)
		}
		w.prefix, w.messages = prefix, true
		return nil
	}
}

// HeadersColumn says that the table has a column name (jsonb; json or
// text work too) for each event's headers: [Event.Headers] and the trace
// context of the ctx given to Write, as one JSON object. The relay turns
// it into record headers when its routing.headers_column names the same
// column; without that key it publishes no headers, whatever the column
// holds.
//
// Without HeadersColumn the Writer writes Debezium's five columns (id,
// aggregatetype, aggregateid, type, payload), the table outboxrelay init
// and the relay's documentation make; there is nowhere to keep a trace
// context, so none is written, and an event with Headers is refused.
// [Writer.DDL] of a Writer with HeadersColumn adds the column to a table
// made without it.
func HeadersColumn(name string) Option {
	return func(w *Writer) error {
		if name == "" || strings.ContainsRune(name, 0) {
			return fmt.Errorf("headers column %q is empty or holds a NUL character; name the column routing.headers_column names, usually headers", name)
		}
		switch name {
		case "id", "aggregatetype", "aggregateid", "type", "payload":
			return fmt.Errorf("headers column %q is one of the event's own columns; name a column of its own, usually headers", name)
		}
		w.headers = name
		return nil
	}
}

// Propagator injects the trace context with p instead of OpenTelemetry's
// global propagator (otel.GetTextMapPropagator), or, while that is unset,
// W3C Trace Context.
func Propagator(p propagation.TextMapPropagator) Option {
	return func(w *Writer) error {
		w.propagator = p
		return nil
	}
}

// New returns a Writer to [DefaultTable], as opts change it.
func New(opts ...Option) (*Writer, error) {
	w := &Writer{}
	if err := Table(DefaultTable)(w); err != nil {
		return nil, err
	}
	var errs []error
	for _, o := range opts {
		errs = append(errs, o(w))
	}
	if w.messages && w.headers != "" {
		errs = append(errs, fmt.Errorf("outbox.HeadersColumn(%q) names a column of the outbox table, and a Messages writer has none: it writes headers into each message's \"headers\" member; leave HeadersColumn out", w.headers))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return w, nil
}

var defaultWriter, _ = New()

// Write writes events with a Writer to [DefaultTable], with Debezium's
// five columns and no headers column.
func Write(ctx context.Context, tx any, events ...Event) error {
	return defaultWriter.Write(ctx, tx, events...)
}

// PgxTx is what Write needs of a pgx.Tx (or pgx.Conn, pgxpool.Tx).
type PgxTx interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// SQLTx is what Write needs of a *sql.Tx.
type SQLTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// maxRowsPerInsert bounds one INSERT's rows: at most 6 parameters each,
// under PostgreSQL's 65535 parameters a statement.
const maxRowsPerInsert = 1000

// Write writes events, in order, in tx: a pgx.Tx ([PgxTx]) or a *sql.Tx
// ([SQLTx]). They are committed, and reach the relay, when tx commits,
// and not at all when it rolls back. The trace context of ctx goes into
// each event's headers, when the Writer writes headers ([HeadersColumn],
// [Messages]). Events of one aggregate reach Kafka in the order written.
// An event the Writer cannot write as given (a payload that is not JSON,
// Headers without a headers column, …) is refused before anything is
// sent, and tx is as it was. Any other error leaves tx as a failed
// statement does: roll it back.
func (w *Writer) Write(ctx context.Context, tx any, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	exec, err := execer(tx)
	if err != nil {
		return err
	}
	rows := make([]row, len(events))
	prop := w.propagator
	if prop == nil {
		prop = otel.GetTextMapPropagator()
		if len(prop.Fields()) == 0 {
			// The global propagator is the no-op one until the
			// application sets its own: W3C Trace Context still carries
			// the span, which is what a trace through the outbox needs.
			prop = propagation.TraceContext{}
		}
	}
	for i := range events {
		if rows[i], err = w.newRow(ctx, prop, &events[i]); err != nil {
			return fmt.Errorf("outbox event %d of %d (aggregate %q %q): %w", i+1, len(events), events[i].AggregateType, events[i].AggregateID, err)
		}
	}
	if w.messages {
		return w.emit(ctx, tx, exec, rows)
	}
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerInsert)
		if err := exec(ctx, w.insert(n), w.insertArgs(rows[:n])...); err != nil {
			return fmt.Errorf("insert %d outbox events into %s: %w%s", n, w.table, err, w.hint(err))
		}
		rows = rows[n:]
	}
	return nil
}

// row is an event as written: its text columns, the payload and headers
// as JSON text, nil for NULL.
type row struct {
	id, aggType, aggID, typ string
	payload, headers        any // string or nil
}

// newRow checks e and makes its row; its headers only when the Writer
// writes them.
func (w *Writer) newRow(ctx context.Context, prop propagation.TextMapPropagator, e *Event) (row, error) {
	r := row{id: e.ID, aggType: e.AggregateType, aggID: e.AggregateID, typ: e.Type}
	if r.id == "" {
		r.id = NewID()
	} else if _, err := uuid.Parse(r.id); err != nil {
		return row{}, fmt.Errorf("id %q is not a UUID; leave it empty for a new UUIDv7", e.ID)
	}
	if r.aggType == "" || r.aggID == "" {
		return row{}, errors.New("aggregate type and aggregate id must not be empty: they name the topic and the record key")
	}
	if e.Payload != nil {
		if !json.Valid(e.Payload) {
			return row{}, errors.New("payload is not a JSON document")
		}
		r.payload = string(e.Payload)
	}
	if !w.messages && w.headers == "" {
		if len(e.Headers) > 0 {
			return row{}, w.noHeadersColumn()
		}
		return r, nil
	}
	h := make(propagation.MapCarrier, len(e.Headers)+2)
	for k, v := range e.Headers {
		h[k] = v
	}
	prop.Inject(ctx, h)
	if len(h) > 0 {
		b, err := json.Marshal(map[string]string(h))
		if err != nil {
			return row{}, fmt.Errorf("headers: %w", err)
		}
		r.headers = string(b)
	}
	return r, nil
}

// noHeadersColumn is the error of an event with Headers for a table
// without a headers column: writing the event without them would drop
// what the application meant to publish, so it says how to make a place
// for them.
func (w *Writer) noHeadersColumn() error {
	return fmt.Errorf("the event has Headers, but the Writer's table %s has no headers column to write them to: "+
		"add one (ALTER TABLE %s ADD COLUMN headers jsonb), write with outbox.New(outbox.Table(%q), outbox.HeadersColumn(\"headers\")), "+
		"and set the relay's routing.headers_column: headers; or leave Headers out", w.table, w.quoted, w.table)
}

// hint says how to mend the table of an INSERT that failed on a missing
// column: the headers column a Writer with [HeadersColumn] writes is the
// one a table made from the relay's documentation lacks.
func (w *Writer) hint(err error) string {
	var pgErr *pgconn.PgError
	if w.headers == "" || !errors.As(err, &pgErr) || pgErr.Code != pgerrUndefinedColumn {
		return ""
	}
	return fmt.Sprintf("; outbox.HeadersColumn(%q) writes a column the table may not have: add it (ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s jsonb, which Writer.DDL() includes)",
		w.headers, w.quoted, pgx.Identifier{w.headers}.Sanitize())
}

// pgerrUndefinedColumn is SQLSTATE undefined_column.
const pgerrUndefinedColumn = "42703"

// columns is what each row writes, in the order of [Writer.insertArgs].
func (w *Writer) columns() int {
	if w.headers != "" {
		return 6
	}
	return 5
}

func (w *Writer) insert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(w.quoted)
	b.WriteString(" (id, aggregatetype, aggregateid, type, payload")
	if w.headers != "" {
		b.WriteString(", ")
		b.WriteString(pgx.Identifier{w.headers}.Sanitize())
	}
	b.WriteString(") VALUES ")
	cols := w.columns()
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		p := i * cols
		fmt.Fprintf(&b, "($%d::uuid, $%d, $%d, $%d, $%d::jsonb", p+1, p+2, p+3, p+4, p+5)
		if w.headers != "" {
			fmt.Fprintf(&b, ", $%d::jsonb", p+6)
		}
		b.WriteString(")")
	}
	return b.String()
}

func (w *Writer) insertArgs(rows []row) []any {
	args := make([]any, 0, w.columns()*len(rows))
	for _, r := range rows {
		args = append(args, r.id, r.aggType, r.aggID, r.typ, r.payload)
		if w.headers != "" {
			args = append(args, r.headers)
		}
	}
	return args
}

// messageContent is the content of a logical decoding message: the event
// as the relay reads it.
type messageContent struct {
	ID            string            `json:"id"`
	AggregateType string            `json:"aggregatetype"`
	AggregateID   string            `json:"aggregateid"`
	Type          string            `json:"type"`
	Payload       json.RawMessage   `json:"payload"`
	Headers       map[string]string `json:"headers,omitempty"`
}

// MessageContent returns the content [Messages] writes for e, with its
// trace context already in e.Headers: for a test, or a writer in another
// language to compare with.
func MessageContent(e Event) ([]byte, error) {
	r, err := (&Writer{messages: true}).newRow(context.Background(), propagation.TraceContext{}, &e)
	if err != nil {
		return nil, err
	}
	return r.content()
}

func (r row) content() ([]byte, error) {
	c := messageContent{ID: r.id, AggregateType: r.aggType, AggregateID: r.aggID, Type: r.typ, Payload: json.RawMessage("null")}
	if p, ok := r.payload.(string); ok {
		c.Payload = json.RawMessage(p)
	}
	if h, ok := r.headers.(string); ok {
		if err := json.Unmarshal([]byte(h), &c.Headers); err != nil {
			return nil, err
		}
	}
	return json.Marshal(c)
}

const emitSQL = "SELECT pg_logical_emit_message(true, $1, $2::text)"

// emit writes rows as logical decoding messages, one statement each, in
// order: with pgx, in one round trip.
func (w *Writer) emit(ctx context.Context, tx any, exec execFunc, rows []row) error {
	contents := make([]string, len(rows))
	for i, r := range rows {
		c, err := r.content()
		if err != nil {
			return fmt.Errorf("outbox event %d of %d: %w", i+1, len(rows), err)
		}
		contents[i] = string(c)
	}
	if bt, ok := tx.(interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	}); ok {
		var b pgx.Batch
		for _, c := range contents {
			b.Queue(emitSQL, w.prefix, c)
		}
		if err := bt.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("emit %d outbox messages with prefix %q: %w", len(rows), w.prefix, err)
		}
		return nil
	}
	for i, c := range contents {
		if err := exec(ctx, emitSQL, w.prefix, c); err != nil {
			return fmt.Errorf("emit outbox message %d of %d with prefix %q: %w", i+1, len(rows), w.prefix, err)
		}
	}
	return nil
}

type execFunc func(ctx context.Context, sql string, args ...any) error

func execer(tx any) (execFunc, error) {
	switch t := tx.(type) {
	case PgxTx:
		return func(ctx context.Context, sql string, args ...any) error {
			_, err := t.Exec(ctx, sql, args...)
			return err
		}, nil
	case SQLTx:
		return func(ctx context.Context, sql string, args ...any) error {
			_, err := t.ExecContext(ctx, sql, args...)
			return err
		}, nil
	case nil:
		return nil, errors.New("outbox: tx is nil; pass the transaction the business rows are written in")
	}
	return nil, fmt.Errorf("outbox: tx is a %T, which has neither pgx's Exec nor database/sql's ExecContext; pass a pgx.Tx or a *sql.Tx", tx)
}

// DDL returns the SQL that creates the Writer's table, in the shape
// outboxrelay reads by default: Debezium's five columns (id,
// aggregatetype, aggregateid, type, payload), and a created_at column
// that lets outboxrelay backfill choose rows by time. With
// [HeadersColumn] the table has that column too, and a second statement
// adds it to a table made without it, so running DDL again after opting
// in is how an existing table gets it. With [Messages] there is no table,
// and DDL returns "".
func (w *Writer) DDL() string {
	if w.messages {
		return ""
	}
	var headers, alter string
	if w.headers != "" {
		col := pgx.Identifier{w.headers}.Sanitize()
		headers = fmt.Sprintf("\t%-13s jsonb,\n", col)
		alter = fmt.Sprintf(";\nALTER TABLE %s ADD COLUMN IF NOT EXISTS %s jsonb", w.quoted, col)
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id            uuid PRIMARY KEY,
	aggregatetype text NOT NULL,
	aggregateid   text NOT NULL,
	type          text NOT NULL,
	payload       jsonb,
%s	created_at    timestamptz NOT NULL DEFAULT now()
)%s`, w.quoted, headers, alter)
}
