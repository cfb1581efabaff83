package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// export requests the relay sends and keeps their spans.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []*tracepb.Span
	// service is the service.name of the resource spans came with.
	service string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &export); err != nil {
			t.Errorf("OTLP receiver: the export request is not an ExportTraceServiceRequest (content type %q): %v", req.Header.Get("Content-Type"), err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// spanOf waits for the span whose trace id is traceID and whose parent is
// parentID.
func (r *otlpReceiver) spanOf(t *testing.T, traceID trace.TraceID, parentID trace.SpanID, timeout time.Duration) *tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		for _, s := range r.spans {
			if bytes.Equal(s.TraceId, traceID[:]) && bytes.Equal(s.ParentSpanId, parentID[:]) {
				r.mu.Unlock()
				return s
			}
		}
		n := len(r.spans)
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("after %s the OTLP receiver has %d spans, none of trace %s with parent %s", timeout, n, traceID, parentID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOutboxWriterEndToEnd writes events through the outbox package, with
// pgx and with database/sql, each in the transaction of a business row
// and under the application's span, and follows them: the record arrives
// with the writer's headers and trace id, its traceparent the relay's
// span, which the OTLP receiver gets as the writer's span's child. An
// event written in a transaction rolled back never arrives. Restarted
// without the OTEL_ variables, the relay makes no span and passes the
// writer's traceparent on.
func TestOutboxWriterEndToEnd(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	w, err := outbox.New(outbox.Table("public." + name))
	if err != nil {
		t.Fatal(err)
	}
	orders := name + "_orders"
	for _, ddl := range []string{w.DDL(), fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, total int NOT NULL)`, orders)} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	receiver := newOTLPReceiver(t)
	cfg := yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: public.%s\nrouting:\n  headers_column: headers\ncdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n", name, name, name))
	p := runBinary(t, cfg, "OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.url, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=relay-under-test")
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	// The application's tracer: its spans are what the writer's context
	// carries; they need not be exported for that.
	app := sdktrace.NewTracerProvider().Tracer("shop")
	type written struct {
		id, aggID string
		span      trace.SpanContext
	}
	var events []written
	writeOrder := func(t *testing.T, aggID string, write func(ctx context.Context, id string) error) {
		t.Helper()
		sctx, span := app.Start(ctx, "place order "+aggID)
		defer span.End()
		id := outbox.NewID()
		if err := write(sctx, id); err != nil {
			t.Fatal(err)
		}
		events = append(events, written{id: id, aggID: aggID, span: span.SpanContext()})
	}
	event := func(id, aggID string) outbox.Event {
		return outbox.Event{ID: id, AggregateType: "order", AggregateID: aggID, Type: "OrderPlaced",
			Payload: []byte(`{"id": "` + aggID + `"}`), Headers: map[string]string{"tenant": "acme-" + aggID}}
	}

	writeOrder(t, "pgx-1", func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ($1, 10)`, orders), "pgx-1"); err != nil {
				return err
			}
			return w.Write(ctx, tx, event(id, "pgx-1"))
		})
	})
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	writeOrder(t, "sql-1", func(ctx context.Context, id string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ($1, 20)`, orders), "sql-1"); err != nil {
			return err
		}
		if err := w.Write(ctx, tx, event(id, "sql-1")); err != nil {
			return err
		}
		return tx.Commit()
	})
	// Rolled back: neither the order nor its event exists.
	rolledBack := outbox.NewID()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, tx, event(rolledBack, "gone-1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The last: once it arrived, the rolled-back one would have.
	writeOrder(t, "pgx-2", func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return w.Write(ctx, tx, event(id, "pgx-2"))
		})
	})

	c := newCollector(t, brokers, "outbox.event.order")
	want := map[string]row{}
	for _, e := range events {
		want[e.id] = row{}
	}
	c.waitFor(t, want, time.Minute)
	c.settle(500 * time.Millisecond)
	if c.ids[rolledBack] != 0 {
		t.Errorf("the event of a rolled-back transaction reached Kafka")
	}
	for _, e := range events {
		var rec *kgoRecord
		for _, r := range c.recs {
			if header(r, "id") == e.id {
				rec = &kgoRecord{key: string(r.Key), value: string(r.Value), tp: header(r, "traceparent"), tenant: header(r, "tenant")}
			}
		}
		if rec.key != e.aggID || rec.value != `{"id": "`+e.aggID+`"}` || rec.tenant != "acme-"+e.aggID {
			t.Errorf("event %s: key %q value %q tenant header %q", e.aggID, rec.key, rec.value, rec.tenant)
		}
		// 00-<trace id>-<the relay's span id>-01
		parts := strings.Split(rec.tp, "-")
		if len(parts) != 4 || parts[1] != e.span.TraceID().String() {
			t.Fatalf("event %s: record traceparent %q, want the writer's trace %s", e.aggID, rec.tp, e.span.TraceID())
		}
		if parts[2] == e.span.SpanID().String() {
			t.Errorf("event %s: the record's parent is the writer's span: the relay made no span of its own", e.aggID)
		}
		span := receiver.spanOf(t, e.span.TraceID(), e.span.SpanID(), time.Minute)
		if got := hex.EncodeToString(span.SpanId); got != parts[2] {
			t.Errorf("event %s: the relay exported span %s, but the record's traceparent names %s", e.aggID, got, parts[2])
		}
		if span.Name != "send outbox.event.order" || span.Kind != tracepb.Span_SPAN_KIND_PRODUCER || span.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("event %s: span %q kind %v status %v", e.aggID, span.Name, span.Kind, span.Status)
		}
	}
	receiver.mu.Lock()
	if receiver.service != "relay-under-test" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", receiver.service)
	}
	spans := len(receiver.spans)
	receiver.mu.Unlock()

	// Without OTEL_EXPORTER_OTLP_ENDPOINT the relay makes no span: the
	// record carries the writer's traceparent as written, and nothing
	// reaches the receiver.
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	p = runBinary(t, cfg)
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	events = nil
	writeOrder(t, "pgx-3", func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, event(id, "pgx-3")) })
	})
	c.waitFor(t, map[string]row{events[0].id: {}}, time.Minute)
	for _, r := range c.recs {
		if header(r, "id") == events[0].id {
			want := fmt.Sprintf("00-%s-%s-01", events[0].span.TraceID(), events[0].span.SpanID())
			if got := header(r, "traceparent"); got != want {
				t.Errorf("with tracing off, the record's traceparent is %q, want the writer's %q", got, want)
			}
		}
	}
	time.Sleep(time.Second) // longer than OTEL_BSP_SCHEDULE_DELAY, were it set
	receiver.mu.Lock()
	if n := len(receiver.spans); n != spans {
		t.Errorf("with tracing off, the receiver got %d more spans", n-spans)
	}
	receiver.mu.Unlock()
}

type kgoRecord struct{ key, value, tp, tenant string }

// TestOutboxWriterMessages writes events as logical decoding messages
// (outbox.Messages), with pgx (one batch) and database/sql, and reads the
// WAL back through a test_decoding slot: each event is one transactional
// message of the prefix, in the order written, its content the JSON the
// relay's cdc.message_prefixes reads, the trace context in its headers;
// a rolled-back transaction's messages are not decoded at all.
func TestOutboxWriterMessages(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	slot := uniqueName(t)
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	w, err := outbox.New(outbox.Messages("orders-outbox"))
	if err != nil {
		t.Fatal(err)
	}
	sctx, span := sdktrace.NewTracerProvider().Tracer("shop").Start(ctx, "place orders")
	defer span.End()
	ev := func(aggID, typ string) outbox.Event {
		return outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: aggID, Type: typ, Payload: []byte(`{"agg": "` + aggID + `"}`)}
	}
	want := []outbox.Event{ev("1", "Placed"), ev("1", "Paid"), ev("2", "Placed")}
	if err := pgx.BeginFunc(sctx, pool, func(tx pgx.Tx) error { return w.Write(sctx, tx, want[0], want[1]) }); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(sctx, tx, ev("gone", "Placed")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	stx, err := db.BeginTx(sctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(sctx, stx, want[2]); err != nil {
		t.Fatal(err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}

	// Commits may be asynchronous, and decoding reads only WAL already
	// written: read until the last commit's message is there.
	var msgs []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rows, err := pool.Query(ctx, `SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL) WHERE data LIKE 'message:%'`, slot)
		if err != nil {
			t.Fatal(err)
		}
		if msgs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 && strings.Contains(msgs[len(msgs)-1], want[len(want)-1].ID) || time.Now().After(deadline) {
			break
		}
	}
	if len(msgs) != len(want) {
		t.Fatalf("decoded %d messages, want %d (the rolled-back one not among them):\n%s", len(msgs), len(want), strings.Join(msgs, "\n"))
	}
	traceparent := fmt.Sprintf("00-%s-%s-01", span.SpanContext().TraceID(), span.SpanContext().SpanID())
	for i, m := range msgs {
		// message: transactional: 1 prefix: orders-outbox, sz: N content:{...}
		head, content, ok := strings.Cut(m, " content:")
		if !ok || !strings.HasPrefix(head, "message: transactional: 1 prefix: orders-outbox, sz: ") {
			t.Fatalf("message %d is not a transactional message of the prefix: %s", i, m)
		}
		wantContent := fmt.Sprintf(`{"id":%q,"aggregatetype":"order","aggregateid":%q,"type":%q,"payload":{"agg":%q},"headers":{"traceparent":%q}}`,
			want[i].ID, want[i].AggregateID, want[i].Type, want[i].AggregateID, traceparent)
		if content != wantContent {
			t.Errorf("message %d content\n%s\nwant\n%s", i, content, wantContent)
		}
	}
}
