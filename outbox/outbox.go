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
	// Headers become the record's headers (the relay's
	// routing.headers_column). The trace context of the ctx given to
	// Write is added as traceparent and tracestate, replacing entries of
	// those names.
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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return w, nil
}

var defaultWriter, _ = New()

// Write writes events with a Writer to [DefaultTable].
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

// maxRowsPerInsert bounds one INSERT's rows: 6 parameters each, under
// PostgreSQL's 65535 parameters a statement.
const maxRowsPerInsert = 1000

// Write writes events, in order, in tx: a pgx.Tx ([PgxTx]) or a *sql.Tx
// ([SQLTx]). They are committed, and reach the relay, when tx commits,
// and not at all when it rolls back. The trace context of ctx goes into
// each event's headers. Events of one aggregate reach Kafka in the order
// written. An error leaves tx as a failed statement does: roll it back.
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
		if rows[i], err = newRow(ctx, prop, &events[i]); err != nil {
			return fmt.Errorf("outbox event %d of %d (aggregate %q %q): %w", i+1, len(events), events[i].AggregateType, events[i].AggregateID, err)
		}
	}
	if w.messages {
		return w.emit(ctx, tx, exec, rows)
	}
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerInsert)
		if err := exec(ctx, w.insert(n), insertArgs(rows[:n])...); err != nil {
			return fmt.Errorf("insert %d outbox events into %s: %w", n, w.table, err)
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

func newRow(ctx context.Context, prop propagation.TextMapPropagator, e *Event) (row, error) {
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

func (w *Writer) insert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(w.quoted)
	b.WriteString(" (id, aggregatetype, aggregateid, type, payload, headers) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		p := i * 6
		fmt.Fprintf(&b, "($%d::uuid, $%d, $%d, $%d, $%d::jsonb, $%d::jsonb)", p+1, p+2, p+3, p+4, p+5, p+6)
	}
	return b.String()
}

func insertArgs(rows []row) []any {
	args := make([]any, 0, 6*len(rows))
	for _, r := range rows {
		args = append(args, r.id, r.aggType, r.aggID, r.typ, r.payload, r.headers)
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
	r, err := newRow(context.Background(), propagation.TraceContext{}, &e)
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

// DDL returns the statement that creates the Writer's table, in the shape
// outboxrelay reads by default (Debezium's column names) with a headers
// column for routing.headers_column. With [Messages] there is no table,
// and DDL returns "".
func (w *Writer) DDL() string {
	if w.messages {
		return ""
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id            uuid PRIMARY KEY,
	aggregatetype text NOT NULL,
	aggregateid   text NOT NULL,
	type          text NOT NULL,
	payload       jsonb,
	headers       jsonb,
	created_at    timestamptz NOT NULL DEFAULT now()
)`, w.quoted)
}
