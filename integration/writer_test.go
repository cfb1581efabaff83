package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The Go writer (outbox/, a module of its own) is not imported here: the
// relay's module does not require it, so that each builds, installs and
// is released without the other. These tests write with it all the same,
// as an application does: they run the writer module's test binary, whose
// TestWritesForTheRelay carries out a writePlan (one transaction) against
// the database the test made, and then follow the events through the
// relay into Kafka.

// writePlan is one transaction for the writer to write, and
// writePlanResult what came of it: a copy of outbox/relaywrites_test.go's
// types, the JSON being the contract between the two modules' tests.
type writePlan struct {
	URL           string      `json:"url"`
	Driver        string      `json:"driver"` // "pgx" or "database/sql"
	Table         string      `json:"table,omitempty"`
	HeadersColumn string      `json:"headers_column,omitempty"`
	Messages      string      `json:"messages,omitempty"`
	DDL           bool        `json:"ddl,omitempty"`
	Before        []string    `json:"before,omitempty"`
	After         []string    `json:"after,omitempty"`
	Events        []planEvent `json:"events"`
	TraceParent   string      `json:"traceparent,omitempty"`
	Rollback      bool        `json:"rollback,omitempty"`
	Result        string      `json:"result"`
}

type planEvent struct {
	ID            string            `json:"id,omitempty"`
	AggregateType string            `json:"aggregatetype"`
	AggregateID   string            `json:"aggregateid"`
	Type          string            `json:"type"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
}

type writePlanResult struct {
	DDL       string    `json:"ddl,omitempty"`
	WriteErr  string    `json:"write_err,omitempty"`
	CommitErr string    `json:"commit_err,omitempty"`
	Before    time.Time `json:"before"`
	After     time.Time `json:"after"`
}

var writerTests struct {
	once sync.Once
	path string
	err  error
}

// writerTestBinary builds the writer module's test binary once per test
// binary, from ../outbox with its own go.mod.
func writerTestBinary(t testing.TB) string {
	t.Helper()
	b := &writerTests
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "outboxrelay-writer-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "outbox.test")
		cmd := exec.Command("go", "test", "-c", "-o", b.path, ".")
		cmd.Dir = filepath.Join("..", "outbox")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go test -c in %s: %v\n%s", cmd.Dir, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// write has the writer carry out p, failing the test if it could not;
// a Write or a commit that failed is the result's to say.
func write(t testing.TB, p writePlan) writePlanResult {
	t.Helper()
	p.Result = filepath.Join(t.TempDir(), "result.json")
	plan, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(writerTestBinary(t), "-test.run", "^TestWritesForTheRelay$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_WRITE_PLAN="+string(plan))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the writer's TestWritesForTheRelay: %v\n%s", err, out)
	}
	data, err := os.ReadFile(p.Result)
	if err != nil {
		t.Fatalf("the writer wrote no result (%v):\n%s", err, out)
	}
	var res writePlanResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// committed fails the test unless res is a Write that went through and
// committed.
func committed(t testing.TB, res writePlanResult) writePlanResult {
	t.Helper()
	if res.WriteErr != "" || res.CommitErr != "" {
		t.Fatalf("write: %s; commit: %s", res.WriteErr, res.CommitErr)
	}
	return res
}

// newSpan returns a sampled span context with random ids, as the request
// that writes an event would have, and its W3C traceparent.
func newSpan(t testing.TB) (trace.SpanContext, string) {
	t.Helper()
	var tid trace.TraceID
	var sid trace.SpanID
	if _, err := rand.Read(tid[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(sid[:]); err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return sc, fmt.Sprintf("00-%s-%s-01", tid, sid)
}

// readmeTable is the outbox table README.md documents, as it is there.
func readmeTable(t testing.TB) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)The outbox table is Debezium's:\\s*```sql\n(CREATE TABLE public\\.outbox .*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```sql block of CREATE TABLE public.outbox after \"The outbox table is Debezium's:\"")
	}
	return string(m[1])
}

// recordOf returns the record whose id header is id, nil if none.
func recordOf(c *collector, id string) *kgo.Record {
	for _, r := range c.recs {
		if header(r, "id") == id {
			return r
		}
	}
	return nil
}

// headerKeys lists a record's header keys, in order.
func headerKeys(r *kgo.Record) []string {
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	return keys
}

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

// TestWriterOnTheReadmeTable: outbox.Write on the table README.md
// documents, as it is, with the relay's defaults: each event becomes the
// record README's record table describes (topic, key, value, the id header
// alone, the commit time). An event with Headers is refused before
// anything is sent, the error naming the column and the fix, and the
// transaction goes on to commit its business row. Then the fix as the
// error gives it: the Writer's DDL with HeadersColumn adds the column to
// the same table, and with routing.headers_column the headers arrive.
func TestWriterOnTheReadmeTable(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	for _, ddl := range []string{readmeTable(t), `CREATE TABLE orders (id text PRIMARY KEY)`} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(extra string) string {
		return yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: public.outbox\nsource: cdc\ncdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n%s", name, name, extra))
	}
	p := runBinary(t, cfg(""))
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	order := func(id string) string { return fmt.Sprintf(`INSERT INTO orders VALUES ('%s')`, id) }

	written := map[string]writePlanResult{}
	events := map[string]planEvent{}
	for _, driver := range []string{"pgx", "database/sql"} {
		e := planEvent{ID: newEventID(), AggregateType: "order", AggregateID: driver, Type: "OrderPlaced", Payload: json.RawMessage(`{"by": "` + driver + `"}`)}
		written[e.ID] = committed(t, write(t, writePlan{URL: url, Driver: driver, Before: []string{order(driver)}, Events: []planEvent{e}}))
		events[e.ID] = e
	}
	refused := planEvent{ID: newEventID(), AggregateType: "order", AggregateID: "refused", Type: "OrderPlaced", Headers: map[string]string{"tenant": "acme"}}
	res := write(t, writePlan{URL: url, Driver: "pgx", Before: []string{order("refused")}, Events: []planEvent{refused}})
	for _, want := range []string{
		"the Writer's table public.outbox has no headers column",
		`ALTER TABLE "public"."outbox" ADD COLUMN headers jsonb`,
		`outbox.HeadersColumn("headers")`,
		"routing.headers_column: headers",
	} {
		if !strings.Contains(res.WriteErr, want) {
			t.Errorf("Write with Headers on the README's table: err %q, want one saying %q", res.WriteErr, want)
		}
	}
	var orderKept bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM orders WHERE id = 'refused')`).Scan(&orderKept); err != nil {
		t.Fatal(err)
	}
	if res.CommitErr != "" || !orderKept {
		t.Errorf("the refused Write sent something that failed its transaction: commit %q, its order kept %v", res.CommitErr, orderKept)
	}

	c := newCollector(t, brokers, "outbox.event.order")
	want := map[string]row{}
	for id := range written {
		want[id] = row{}
	}
	c.waitFor(t, want, time.Minute)
	c.settle(500 * time.Millisecond)
	for id, e := range events {
		r := recordOf(c, id)
		res := written[id]
		if r.Topic != "outbox.event.order" || string(r.Key) != e.AggregateID || string(r.Value) != string(e.Payload) {
			t.Errorf("event %s: topic %q key %q value %q, want outbox.event.order, %q, %s", e.AggregateID, r.Topic, r.Key, r.Value, e.AggregateID, e.Payload)
		}
		if keys := headerKeys(r); len(keys) != 1 || keys[0] != "id" {
			t.Errorf("event %s: headers %q, want the id header alone", e.AggregateID, keys)
		}
		if r.Timestamp.Before(res.Before.Truncate(time.Millisecond)) || r.Timestamp.After(res.After) {
			t.Errorf("event %s: timestamp %s, want the commit's, between %s and %s", e.AggregateID, r.Timestamp, res.Before, res.After)
		}
	}
	if c.ids[refused.ID] != 0 {
		t.Errorf("the refused event reached Kafka")
	}

	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	_, tp := newSpan(t)
	opted := planEvent{ID: newEventID(), AggregateType: "order", AggregateID: "opted-in", Type: "OrderPlaced", Payload: json.RawMessage(`{}`), Headers: map[string]string{"tenant": "acme"}}
	res = committed(t, write(t, writePlan{URL: url, Driver: "pgx", HeadersColumn: "headers", DDL: true, TraceParent: tp, Events: []planEvent{opted}}))
	if !strings.Contains(res.DDL, `ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "headers" jsonb`) {
		t.Errorf("the DDL with HeadersColumn does not add the column to an existing table:\n%s", res.DDL)
	}
	p = runBinary(t, cfg("routing:\n  headers_column: headers\n"))
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	c.waitFor(t, map[string]row{opted.ID: {}}, time.Minute)
	r := recordOf(c, opted.ID)
	if keys := headerKeys(r); len(keys) != 3 || keys[0] != "id" || header(r, "tenant") != "acme" || header(r, "traceparent") != tp {
		t.Errorf("with the headers column and routing.headers_column: headers %q (tenant %q, traceparent %q), want id, then tenant acme and traceparent %s",
			keys, header(r, "tenant"), header(r, "traceparent"), tp)
	}
}

// TestOutboxWriterEndToEnd writes events with a Writer to a table of its
// own DDL with a headers column, with pgx and with database/sql, each in
// the transaction of a business row and under the application's span, and
// follows them: the record arrives with the writer's headers and trace id,
// its traceparent the relay's span, which the OTLP receiver gets as the
// writer's span's child. An event written in a transaction rolled back
// never arrives. Restarted without the OTEL_ variables, the relay makes no
// span and passes the writer's traceparent on.
func TestOutboxWriterEndToEnd(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	table := "public." + name
	orders := name + "_orders"
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, total int NOT NULL)`, orders)); err != nil {
		t.Fatal(err)
	}
	// The Writer makes its table, then the relay starts: the slot is made
	// before the first event.
	committed(t, write(t, writePlan{URL: url, Driver: "pgx", Table: table, HeadersColumn: "headers", DDL: true}))
	receiver := newOTLPReceiver(t)
	cfg := yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: %s\nrouting:\n  headers_column: headers\ncdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n", table, name, name))
	p := runBinary(t, cfg, "OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.url, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=relay-under-test")
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	type written struct {
		id, aggID string
		span      trace.SpanContext
	}
	var events []written
	// writeOrder writes an order and its event in one transaction, under a
	// span of its own.
	writeOrder := func(t *testing.T, driver, aggID string, rollback bool) written {
		t.Helper()
		span, tp := newSpan(t)
		e := written{id: newEventID(), aggID: aggID, span: span}
		committed(t, write(t, writePlan{URL: url, Driver: driver, Table: table, HeadersColumn: "headers", TraceParent: tp, Rollback: rollback,
			Before: []string{fmt.Sprintf(`INSERT INTO %s VALUES ('%s', 10)`, orders, aggID)},
			Events: []planEvent{{ID: e.id, AggregateType: "order", AggregateID: aggID, Type: "OrderPlaced",
				Payload: json.RawMessage(`{"id": "` + aggID + `"}`), Headers: map[string]string{"tenant": "acme-" + aggID}}}}))
		return e
	}
	events = append(events, writeOrder(t, "pgx", "pgx-1", false), writeOrder(t, "database/sql", "sql-1", false))
	// Rolled back: neither the order nor its event exists.
	rolledBack := writeOrder(t, "pgx", "gone-1", true)
	// The last: once it arrived, the rolled-back one would have.
	events = append(events, writeOrder(t, "pgx", "pgx-2", false))

	c := newCollector(t, brokers, "outbox.event.order")
	want := map[string]row{}
	for _, e := range events {
		want[e.id] = row{}
	}
	c.waitFor(t, want, time.Minute)
	c.settle(500 * time.Millisecond)
	if c.ids[rolledBack.id] != 0 {
		t.Errorf("the event of a rolled-back transaction reached Kafka")
	}
	for _, e := range events {
		checkTracedRecord(t, recordOf(c, e.id), receiver, e.aggID, e.span)
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
	last := writeOrder(t, "pgx", "pgx-3", false)
	c.waitFor(t, map[string]row{last.id: {}}, time.Minute)
	wantTP := fmt.Sprintf("00-%s-%s-01", last.span.TraceID(), last.span.SpanID())
	if got := header(recordOf(c, last.id), "traceparent"); got != wantTP {
		t.Errorf("with tracing off, the record's traceparent is %q, want the writer's %q", got, wantTP)
	}
	time.Sleep(time.Second) // longer than OTEL_BSP_SCHEDULE_DELAY, were it set
	receiver.mu.Lock()
	if n := len(receiver.spans); n != spans {
		t.Errorf("with tracing off, the receiver got %d more spans", n-spans)
	}
	receiver.mu.Unlock()
}

// checkTracedRecord checks the record of the event of aggregate aggID,
// written under span with a tenant header, as the relay with tracing on
// publishes it: the writer's headers, its traceparent the relay's span,
// which the receiver has as the writer's span's child.
func checkTracedRecord(t *testing.T, r *kgo.Record, receiver *otlpReceiver, aggID string, span trace.SpanContext) {
	t.Helper()
	if string(r.Key) != aggID || string(r.Value) != `{"id": "`+aggID+`"}` || header(r, "tenant") != "acme-"+aggID {
		t.Errorf("event %s: key %q value %q tenant header %q", aggID, r.Key, r.Value, header(r, "tenant"))
	}
	// 00-<trace id>-<the relay's span id>-01
	tp := header(r, "traceparent")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[1] != span.TraceID().String() {
		t.Fatalf("event %s: record traceparent %q, want the writer's trace %s", aggID, tp, span.TraceID())
	}
	if parts[2] == span.SpanID().String() {
		t.Errorf("event %s: the record's parent is the writer's span: the relay made no span of its own", aggID)
	}
	exported := receiver.spanOf(t, span.TraceID(), span.SpanID(), time.Minute)
	if got := hex.EncodeToString(exported.SpanId); got != parts[2] {
		t.Errorf("event %s: the relay exported span %s, but the record's traceparent names %s", aggID, got, parts[2])
	}
	if exported.Name != "send outbox.event.order" || exported.Kind != tracepb.Span_SPAN_KIND_PRODUCER || exported.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("event %s: span %q kind %v status %v", aggID, exported.Name, exported.Kind, exported.Status)
	}
}

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
	_, traceparent := newSpan(t)
	ev := func(aggID, typ string) planEvent {
		return planEvent{ID: newEventID(), AggregateType: "order", AggregateID: aggID, Type: typ, Payload: json.RawMessage(`{"agg": "` + aggID + `"}`)}
	}
	want := []planEvent{ev("1", "Placed"), ev("1", "Paid"), ev("2", "Placed")}
	plan := func(driver string, rollback bool, events ...planEvent) writePlan {
		return writePlan{URL: url, Driver: driver, Messages: "orders-outbox", TraceParent: traceparent, Rollback: rollback, Events: events}
	}
	committed(t, write(t, plan("pgx", false, want[0], want[1])))
	committed(t, write(t, plan("pgx", true, ev("gone", "Placed"))))
	committed(t, write(t, plan("database/sql", false, want[2])))

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

// TestWriterMessagesRelayed: a Messages writer, as its example writes it,
// and the relay with cdc.message_prefixes and otherwise its defaults give
// the record a row would (the id header alone: the message's headers,
// here the trace context, are not published); with routing.headers_column:
// headers its headers arrive.
func TestWriterMessagesRelayed(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	if _, err := pool.Exec(ctx, readmeTable(t)); err != nil {
		t.Fatal(err)
	}
	cfg := func(extra string) string {
		return yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: public.outbox\ncdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n  message_prefixes: [outbox]\n%s", name, name, extra))
	}
	p := runBinary(t, cfg(""))
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	_, tp := newSpan(t)
	plain := planEvent{ID: newEventID(), AggregateType: "order", AggregateID: "42", Type: "OrderPaid", Payload: json.RawMessage(`{"id":42}`)}
	res := committed(t, write(t, writePlan{URL: url, Driver: "database/sql", Messages: "outbox", TraceParent: tp, Events: []planEvent{plain}}))
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, map[string]row{plain.ID: {}}, time.Minute)
	r := recordOf(c, plain.ID)
	if string(r.Key) != "42" || string(r.Value) != `{"id":42}` || len(r.Headers) != 1 {
		t.Errorf("message record: key %q value %q headers %q, want 42, {\"id\":42} and the id header alone", r.Key, r.Value, headerKeys(r))
	}
	if r.Timestamp.Before(res.Before.Truncate(time.Millisecond)) || r.Timestamp.After(res.After) {
		t.Errorf("message record: timestamp %s, want the commit's, between %s and %s", r.Timestamp, res.Before, res.After)
	}

	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	p = runBinary(t, cfg("routing:\n  headers_column: headers\n"))
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	tagged := planEvent{ID: newEventID(), AggregateType: "order", AggregateID: "43", Type: "OrderPaid", Payload: json.RawMessage(`{"id":43}`), Headers: map[string]string{"tenant": "acme"}}
	committed(t, write(t, writePlan{URL: url, Driver: "pgx", Messages: "outbox", TraceParent: tp, Events: []planEvent{tagged}}))
	c.waitFor(t, map[string]row{tagged.ID: {}}, time.Minute)
	r = recordOf(c, tagged.ID)
	if header(r, "tenant") != "acme" || header(r, "traceparent") != tp {
		t.Errorf("message record with routing.headers_column: headers %q (tenant %q, traceparent %q), want tenant acme and traceparent %s", headerKeys(r), header(r, "tenant"), header(r, "traceparent"), tp)
	}
}

// TestInitMakesTheWritersTable: outboxrelay init makes the table the
// writer writes: Debezium's five columns by default, and with
// routing.headers_column the headers column too, added to a table made
// without it, which is what outbox.HeadersColumn writes.
func TestInitMakesTheWritersTable(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want, not   []string
	}{
		{"defaults", "", []string{`"payload"       jsonb` + "\n);", "set\n-- routing.headers_column: headers and run init again"}, []string{`"headers"`}},
		{"headers column", "routing:\n  headers_column: headers\n", []string{`"headers"       jsonb` + "\n);", `ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "headers" jsonb;`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig("postgres://relay@127.0.0.1:1/app", []string{"127.0.0.1:1"}, "outbox:\n  table: public.outbox\n"+tc.extra))
			p := startBinary(t, []string{"init", "--config", cfg})
			if code := p.exit(t, time.Minute); code != 0 {
				t.Fatalf("init: exit code %d:\n%s", code, p.out)
			}
			for _, want := range tc.want {
				if !strings.Contains(p.out.String(), want) {
					t.Errorf("init's SQL lacks %q:\n%s", want, p.out)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(p.out.String(), not) {
					t.Errorf("init's SQL has %q:\n%s", not, p.out)
				}
			}
		})
	}
}
