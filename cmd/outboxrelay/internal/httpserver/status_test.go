package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fixture is a cdc relay's status with a dead letter whose reason holds
// markup, as an event's error may quote its payload.
func fixture() Status {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pid := int32(4242)
	safe := int64(48 << 20)
	lag := uint64(3 << 20)
	f := false
	return Status{
		Version: "v1.2.3", Time: at, StartedAt: at.Add(-time.Hour), Source: "cdc",
		Tables: []string{"public.outbox"}, Postgres: "postgres://relay:xxxxx@db:5432/app", Brokers: []string{"kafka:9092"},
		SourceUp: true,
		Slot: &Slot{Name: "outboxrelay", Exists: true, Active: true, ActivePID: &pid, ConfirmedFlushLSN: "0/16B3748",
			WALStatus: "reserved", SafeWALSizeBytes: &safe, MaxWALKeepSizeBytes: 64 << 20, Failover: &f},
		Lag:            Lag{Bytes: &lag, Seconds: 1.5},
		EventsInFlight: 3, EventsAcknowledged: 1234,
		Rate: Rate{IntervalSeconds: 5, EventsPerSecond: 12.5, Samples: []RateSample{
			{At: at.Add(-10 * time.Second), EventsPerSecond: 2}, {At: at.Add(-5 * time.Second), EventsPerSecond: 20}, {At: at, EventsPerSecond: 12.5}}},
		LastCommitted: &Event{ID: "e-1234", Topic: "outbox.event.order", Timestamp: at.Add(-time.Second), At: at},
		LastPublished: &Event{ID: "e-1233", Topic: "outbox.event.order", Timestamp: at.Add(-2 * time.Second), At: at},
		DeadLetters: DeadLetters{Topic: "outbox.dead-letter", Total: 1, Recent: []DeadLetter{
			{ID: "e-bad", Topic: "outbox.event.order", Reason: `record of 5000 bytes is larger than <script>alert(1)</script>`, At: at}},
			Command: "outboxrelay dead-letters --config '/etc/outbox relay/relay.yaml'"},
		Restarts:  2,
		LastError: &TimedText{Message: "connection reset by peer", At: at.Add(-time.Minute)},
	}
}

// TestStatusEndpoints: with a Status, / is the page and /status its JSON,
// both with the readiness the Ready checks give; values are escaped, the
// page loads nothing from elsewhere and runs no script.
func TestStatusEndpoints(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", Config{
		Gatherer: prometheus.NewRegistry(),
		Ready: []Check{
			{Name: "postgres", Func: func(context.Context) error { return nil }},
			{Name: "kafka", Func: func(context.Context) error { return errors.New("no broker of [kafka:9092] answers") }},
			{Name: "source", Func: func(context.Context) error { return Note("standby") }},
		},
		Status: func(context.Context) Status { return fixture() },
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()
	base := "http://" + srv.Addr()

	status, body := get(t, base+"/status")
	var s Status
	if err := json.Unmarshal([]byte(body), &s); status != 200 || err != nil {
		t.Fatalf("GET /status = %d, %v:\n%s", status, err, body)
	}
	want := fixture()
	want.Ready = false
	want.Readiness = []CheckResult{{"postgres", true, ""}, {"kafka", false, "no broker of [kafka:9092] answers"}, {"source", true, "standby"}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("GET /status:\n got %+v\nwant %+v", s, want)
	}

	status, page := get(t, base+"/")
	if status != 200 {
		t.Fatalf("GET / = %d", status)
	}
	for _, w := range []string{
		`<span id="ready" class="badge fail">not ready</span>`,
		`<span id="source">cdc</span>`, `<dd id="slot-name">outboxrelay</dd>`,
		`held by PID 4242`, `48.0 MiB of max_slot_wal_keep_size 64.0 MiB`, `<dd id="lag-bytes">3.0 MiB</dd>`,
		`<span id="acknowledged">1234</span>`, `<dd id="in-flight">3</dd>`, `<polyline points=`,
		`<b>kafka</b>: FAIL (no broker of [kafka:9092] answers)`, `<b>source</b>: ok (standby)`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`, `e-1233 → outbox.event.order`, `<dd id="restarts">2</dd>`,
		`postgres://relay:xxxxx@db:5432/app`,
		`<code class="note">outboxrelay dead-letters --config &#39;/etc/outbox relay/relay.yaml&#39; redrive --id e-bad</code>`,
		`<code>outboxrelay dead-letters --config &#39;/etc/outbox relay/relay.yaml&#39; list</code>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
	for _, bad := range []string{"<script", "http://", "https://", "src="} {
		if strings.Contains(page, bad) {
			t.Errorf("the page has %q: it must load nothing and run nothing", bad)
		}
	}
}

// TestStatusPageBeforeAnything: a relay that has read nothing yet, of
// source poll, says so rather than showing zero values as times.
func TestStatusPageBeforeAnything(t *testing.T) {
	var b strings.Builder
	s := Status{Source: "poll", Poll: &Poll{Mode: "mark", Interval: "1s", Buckets: 1, Tables: []Table{{Name: "public.outbox", Unpublished: 7}}},
		Rate: Rate{IntervalSeconds: 5}}
	if err := pageTemplate.Execute(&b, newPageView(s)); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Poller claims", "public.outbox</dt><dd>7 row(s) unpublished", "no samples yet: one every 5s",
		`<dd id="last-published">none yet</dd>`, "no dead letter topic"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the page lacks %q:\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), "0001-01-01") {
		t.Errorf("the page shows a zero time")
	}
}

// TestStatusFieldsDocumented keeps docs/status.md and the JSON of /status
// in step: every field is named there, in backquotes.
func TestStatusFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	fields := map[string]bool{}
	jsonFields(reflect.TypeFor[Status](), fields)
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if !documented[f] {
			t.Errorf("/status field %s is not in docs/status.md", f)
		}
	}
}

// jsonFields adds the JSON names of t's fields, and of the structs they
// hold, to out.
func jsonFields(t reflect.Type, out map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
		jsonFields(f.Type, out)
	}
}
