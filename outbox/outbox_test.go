package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// recorder is a *sql.Tx stand-in that records the statements Write sends.
type recorder struct {
	sqls []string
	args [][]any
}

func (r *recorder) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	r.sqls = append(r.sqls, query)
	r.args = append(r.args, args)
	return nil, nil
}

// spanContext is a context holding a sampled remote span, as a request
// handler's would.
func spanContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

func TestWriteInsertsRowsInOrderWithTraceContext(t *testing.T) {
	ctx, _ := spanContext(t)
	var rec recorder
	w, err := New(Table("app.events"), HeadersColumn("headers"))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(ctx, &rec,
		Event{AggregateType: "order", AggregateID: "42", Type: "created", Payload: []byte(`{"n":1}`), Headers: map[string]string{"tenant": "a"}},
		Event{AggregateType: "order", AggregateID: "42", Type: "paid"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.sqls) != 1 {
		t.Fatalf("statements = %d, want one INSERT for the batch", len(rec.sqls))
	}
	if !strings.HasPrefix(rec.sqls[0], `INSERT INTO "app"."events" (id, aggregatetype, aggregateid, type, payload, "headers") VALUES ($1::uuid, $2, $3, $4, $5::jsonb, $6::jsonb), ($7::uuid`) {
		t.Errorf("statement = %s", rec.sqls[0])
	}
	args := rec.args[0]
	if len(args) != 12 {
		t.Fatalf("args = %d, want 12", len(args))
	}
	for _, i := range []int{0, 6} {
		id, err := uuid.Parse(args[i].(string))
		if err != nil || id.Version() != 7 {
			t.Errorf("id %v: version %d, err %v; want a UUIDv7", args[i], id.Version(), err)
		}
	}
	if args[0].(string) >= args[6].(string) {
		t.Errorf("ids %v, %v do not sort in the order written", args[0], args[6])
	}
	if args[3] != "created" || args[4] != `{"n":1}` || args[9] != "paid" || args[10] != nil {
		t.Errorf("type/payload args = %v %v %v %v", args[3], args[4], args[9], args[10])
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(args[5].(string)), &h); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenant": "a", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=value"}
	if len(h) != len(want) {
		t.Errorf("headers = %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
}

func TestWriteWithoutSpanOrHeadersWritesNullHeaders(t *testing.T) {
	var rec recorder
	w, err := New(HeadersColumn("meta"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), &rec, Event{AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	if got := rec.args[0][5]; got != nil {
		t.Errorf("headers = %v, want NULL", got)
	}
}

// TestWriteWritesTheFiveColumnsByDefault: the default Writer writes the
// table README.md and outboxrelay init make, Debezium's five columns, and
// no trace context, which has nowhere to go.
func TestWriteWritesTheFiveColumnsByDefault(t *testing.T) {
	ctx, _ := spanContext(t)
	var rec recorder
	id := NewID()
	if err := Write(ctx, &rec, Event{ID: id, AggregateType: "order", AggregateID: "42", Type: "created", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	want := `INSERT INTO "public"."outbox" (id, aggregatetype, aggregateid, type, payload) VALUES ($1::uuid, $2, $3, $4, $5::jsonb)`
	if len(rec.sqls) != 1 || rec.sqls[0] != want {
		t.Fatalf("statements = %q, want %q", rec.sqls, want)
	}
	if got := fmt.Sprint(rec.args[0]...); len(rec.args[0]) != 5 || got != fmt.Sprint(id, "order", "42", "created", `{"n":1}`) {
		t.Errorf("args = %q, want the five columns' values", rec.args[0])
	}
}

// TestWriteRefusesHeadersWithoutAHeadersColumn: Headers given to a
// Writer whose table has no headers column are refused before anything is
// sent, the error naming the column and the fix; the events before it in
// the same call are not written either.
func TestWriteRefusesHeadersWithoutAHeadersColumn(t *testing.T) {
	var rec recorder
	w, err := New(Table("app.events"))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(context.Background(), &rec,
		Event{AggregateType: "order", AggregateID: "1", Type: "t"},
		Event{AggregateType: "order", AggregateID: "2", Type: "t", Headers: map[string]string{"tenant": "acme"}},
	)
	for _, want := range []string{
		`outbox event 2 of 2 (aggregate "order" "2")`,
		"table app.events has no headers column",
		`ALTER TABLE "app"."events" ADD COLUMN headers jsonb`,
		`outbox.HeadersColumn("headers")`,
		"routing.headers_column: headers",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one saying %q", err, want)
		}
	}
	if len(rec.sqls) != 0 {
		t.Errorf("sent %q before refusing", rec.sqls)
	}
}

func TestWriteSplitsLargeBatches(t *testing.T) {
	var rec recorder
	events := make([]Event, 2500)
	for i := range events {
		events[i] = Event{AggregateType: "a", AggregateID: "1", Type: "t"}
	}
	if err := Write(context.Background(), &rec, events...); err != nil {
		t.Fatal(err)
	}
	var rows []int
	for _, a := range rec.args {
		rows = append(rows, len(a)/5)
	}
	if len(rows) != 3 || rows[0] != 1000 || rows[1] != 1000 || rows[2] != 500 {
		t.Errorf("rows per INSERT = %v, want [1000 1000 500]", rows)
	}
}

func TestWriteRefusesBadEvents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tx    any
		event Event
		want  string
	}{
		{"payload not JSON", &recorder{}, Event{AggregateType: "a", AggregateID: "1", Payload: []byte("{")}, "payload is not a JSON document"},
		{"no aggregate type", &recorder{}, Event{AggregateID: "1"}, "aggregate type and aggregate id must not be empty"},
		{"id not a UUID", &recorder{}, Event{ID: "42", AggregateType: "a", AggregateID: "1"}, `id "42" is not a UUID`},
		{"nil tx", nil, Event{AggregateType: "a", AggregateID: "1"}, "tx is nil"},
		{"not a tx", 3, Event{AggregateType: "a", AggregateID: "1"}, "tx is a int"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(context.Background(), tc.tx, tc.event)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestMessagesEmitsContentInOrder(t *testing.T) {
	ctx, _ := spanContext(t)
	var rec recorder
	w, err := New(Messages("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	if w.DDL() != "" {
		t.Errorf("DDL of a table-less writer = %q, want none", w.DDL())
	}
	id := NewID()
	err = w.Write(ctx, &rec,
		Event{ID: id, AggregateType: "order", AggregateID: "42", Type: "created", Payload: []byte(` {"n": 1}`)},
		Event{AggregateType: "order", AggregateID: "42", Type: "paid"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.sqls) != 2 || rec.sqls[0] != emitSQL {
		t.Fatalf("statements = %q", rec.sqls)
	}
	if rec.args[0][0] != "outbox" {
		t.Errorf("prefix = %v", rec.args[0][0])
	}
	want := `{"id":"` + id + `","aggregatetype":"order","aggregateid":"42","type":"created","payload":{"n":1},"headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=value"}}`
	if got := rec.args[0][1]; got != want {
		t.Errorf("content =\n%s\nwant\n%s", got, want)
	}
	var second map[string]any
	if err := json.Unmarshal([]byte(rec.args[1][1].(string)), &second); err != nil {
		t.Fatal(err)
	}
	if second["payload"] != nil || second["type"] != "paid" {
		t.Errorf("second content = %v, want type paid and payload null", second)
	}
}

func TestMessageContentLeavesOutEmptyHeaders(t *testing.T) {
	c, err := MessageContent(Event{ID: "0190a0b0-0000-7000-8000-000000000001", AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte(`"x"`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"0190a0b0-0000-7000-8000-000000000001","aggregatetype":"a","aggregateid":"1","type":"t","payload":"x"}`; string(c) != want {
		t.Errorf("content = %s, want %s", c, want)
	}
}

func TestOptionsRefuseBadNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Option
		want string
	}{
		{"three parts", Table("a.b.c"), "has 2 dots"},
		{"empty table", Table("public."), "is not a table name"},
		{"empty prefix", Messages(""), "prefix \"\" is empty"},
		{"empty headers column", HeadersColumn(""), `headers column "" is empty`},
		{"headers column an event column", HeadersColumn("payload"), `headers column "payload" is one of the event's own columns`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestDDLQuotesTheTable(t *testing.T) {
	w, err := New(Table(`my"schema.outbox`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(w.DDL(), `CREATE TABLE IF NOT EXISTS "my""schema"."outbox" (`) {
		t.Errorf("DDL = %s", w.DDL())
	}
}

// TestMessagesTakeNoHeadersColumn: a Messages writer has no table, and
// says so rather than ignoring HeadersColumn, in either order.
func TestMessagesTakeNoHeadersColumn(t *testing.T) {
	for _, opts := range [][]Option{
		{Messages("outbox"), HeadersColumn("headers")},
		{HeadersColumn("headers"), Messages("outbox")},
	} {
		if _, err := New(opts...); err == nil || !strings.Contains(err.Error(), `a Messages writer has none: it writes headers into each message's "headers" member`) {
			t.Errorf("err = %v, want one refusing HeadersColumn beside Messages", err)
		}
	}
}

func TestDDLWithHeadersColumnAddsItToAnExistingTable(t *testing.T) {
	w, err := New(Table("app.events"), HeadersColumn("meta"))
	if err != nil {
		t.Fatal(err)
	}
	ddl := w.DDL()
	for _, want := range []string{"\t\"meta\"        jsonb,\n", `ALTER TABLE "app"."events" ADD COLUMN IF NOT EXISTS "meta" jsonb`} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL = %s\nwant it to hold %q", ddl, want)
		}
	}
	plain, _ := New(Table("app.events"))
	if strings.Contains(plain.DDL(), "meta") || strings.Contains(plain.DDL(), "headers") || strings.Contains(plain.DDL(), "ALTER") {
		t.Errorf("DDL without HeadersColumn = %s, want the five columns and created_at", plain.DDL())
	}
}
