package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The operations suite runs the whole relay, the built binary, and
// watches it from outside, through its HTTP endpoint and its log.

// endpoint is a relay's HTTP endpoint.
type endpoint struct {
	base string // http://host:port
	// seen keeps every answer, to search for secrets.
	seen *syncBuffer
}

// appRelay is `outboxrelay run` configured by its environment alone,
// logging JSON.
type appRelay struct {
	endpoint
	p    *proc
	logs *syncBuffer
	// done receives how the process ended once it has: nil for exit 0,
	// else an *exitError.
	done chan error
}

// exitError is a relay process that exited non-zero, with the reason its
// last ERROR record gives.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }

// startApp runs the binary with the configuration env (keys as in the
// file: "postgres.url") and waits until /readyz passes. A CDC relay
// captures only what commits after its slot exists and is streamed from;
// /readyz checks exactly that, so a test may write as soon as startApp
// returns. (Returning when the HTTP address was logged, before the slot
// existed, let a workload written at once under load commit partly before
// the slot: those rows are not captured by design.)
func startApp(t *testing.T, env map[string]string) *appRelay {
	t.Helper()
	a := launchApp(t, env)
	a.waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	return a
}

// launchApp is startApp without the wait for /readyz, for a test of a
// relay that is not meant to be ready yet (waiting for a held slot, say):
// it returns once the HTTP endpoint listens.
func launchApp(t *testing.T, env map[string]string) *appRelay {
	t.Helper()
	environ := []string{"OUTBOXRELAY_LOG_FORMAT=json"}
	for k, v := range env {
		environ = append(environ, "OUTBOXRELAY_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))+"="+v)
	}
	a := &appRelay{endpoint: endpoint{seen: &syncBuffer{}}, done: make(chan error, 1)}
	a.p = startBinary(t, []string{"run"}, environ...)
	a.logs = a.p.out
	exited := make(chan struct{})
	go func() {
		_ = a.p.cmd.Wait()
		close(exited)
		if code := a.p.cmd.ProcessState.ExitCode(); code != 0 {
			a.done <- &exitError{code: code, msg: lastError(a.logs.String())}
		} else {
			a.done <- nil
		}
	}()
	t.Cleanup(func() { a.stop(t) })

	deadline := time.Now().Add(30 * time.Second)
	for a.base == "" {
		for _, l := range logLines(t, a.logs.String()) {
			if l["component"] == "http" && l["addr"] != nil {
				a.base = "http://" + l["addr"].(string)
			}
		}
		select {
		case <-exited:
			t.Fatalf("relay stopped before serving: %v\n%s", <-a.done, a.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay never logged its HTTP address:\n%s", a.logs.String())
		}
	}
	return a
}

// lastError is the err of the last ERROR record in a JSON log, or the
// last line when none is.
func lastError(logs string) string {
	var msg string
	for line := range strings.Lines(logs) {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil {
			msg = strings.TrimSpace(line)
			continue
		}
		if l["level"] == "ERROR" {
			msg, _ = l["err"].(string)
		}
	}
	return msg
}

// cancel asks the relay to stop, as SIGTERM does.
func (a *appRelay) cancel() {
	_ = a.p.cmd.Process.Signal(syscall.SIGTERM)
}

func (a *appRelay) stop(t *testing.T) {
	t.Helper()
	if a.done == nil {
		return
	}
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("relay stopped with an error: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("relay did not stop within a minute")
	}
	a.done = nil
}

// get fetches path from the relay's endpoint.
func (a *endpoint) get(t *testing.T, path string) (int, string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(a.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	fmt.Fprintf(a.seen, "GET %s -> %d\n%s\n", path, resp.StatusCode, body)
	return resp.StatusCode, string(body)
}

// waitStatus polls path until it answers status with a body containing
// every one of want, and returns the body.
func (a *endpoint) waitStatus(t *testing.T, path string, status int, timeout time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := a.get(t, path)
		ok := got == status
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, GET %s answers %d, want %d with %q:\n%s", timeout, path, got, status, want, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrape reads /metrics.
func (a *endpoint) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := a.get(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics = %d:\n%s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// value is the value of the sample of name whose labels include labels
// (a counter, gauge, or a histogram's count); ok is false when there is
// none.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Text())
		}
		out = append(out, l)
	}
	return out
}

// checkLog checks what every line of the relay's log must have.
func checkLog(t *testing.T, logs string, quietKafka bool) {
	t.Helper()
	for _, l := range logLines(t, logs) {
		c, _ := l["component"].(string)
		if c == "" {
			t.Errorf("log line without a component: %v", l)
		}
		// Every Kafka client the relay opens (the producer's, the
		// checkpoint store's) keeps its chatter below warn.
		if quietKafka && strings.HasPrefix(c, "kafka") && (l["level"] == "INFO" || l["level"] == "DEBUG") {
			t.Errorf("a Kafka client logged below warn at log.level info: %v", l)
		}
		checkVocabulary(t, l)
	}
}

// lsnText is a WAL position as PostgreSQL writes it.
var lsnText = regexp.MustCompile(`^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`)

// checkVocabulary holds a JSON record to docs/operations.md#logs: a
// position as PostgreSQL writes it, a duration as Go does, never a bare
// number of bytes' offset or nanoseconds.
func checkVocabulary(t *testing.T, l map[string]any) {
	t.Helper()
	for k, v := range l {
		switch {
		case strings.HasSuffix(k, "_lsn") || k == "lsn":
			if s, ok := v.(string); !ok || !lsnText.MatchString(s) {
				t.Errorf("%s is %v (%T), not a position as PostgreSQL writes it (0/1D4B718): %v", k, v, v, l)
			}
		case strings.HasSuffix(k, "_timeout") || strings.HasSuffix(k, "_interval") || k == "retry_in" || strings.HasSuffix(k, "_after"):
			if _, ok := v.(string); !ok {
				t.Errorf("%s is %v (%T), not a duration as Go writes it (30s): %v", k, v, v, l)
			}
		}
	}
}

// TestOpsMetrics relays a workload and reads it back from /metrics: every
// event counted as published under its topic, each with a latency
// observation, in batches that add up, and nothing left in flight.
func TestOpsMetrics(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.Postgres(t)
	pool := connectPool(t, dbURL)
	const table = "outbox"
	createOutbox(t, pool, table)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	a := startApp(t, map[string]string{
		"postgres.url":        dbURL,
		"outbox.table":        "public." + table,
		"cdc.slot":            name,
		"cdc.publication":     name,
		"cdc.status_interval": "100ms",
		"kafka.brokers":       strings.Join(brokers, ","),
		"http.listen":         "127.0.0.1:0",
	})

	const events = 600
	workload{table: table, writers: 4, aggregates: 20, events: events, txnSize: 3}.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, table)
	newCollector(t, brokers, "outbox.event.order").waitFor(t, rows, time.Minute)

	// The consumer may read a record before the producer has the broker's
	// answer, and the batch's acknowledgement (which empties in-flight and
	// the oldest age) comes after the records' own; the figures catch up
	// at once. Wait for all of them, then check every one below.
	var mfs map[string]*dto.MetricFamily
	deadline := time.Now().Add(10 * time.Second)
	for {
		mfs = a.scrape(t)
		n, _ := value(mfs, "outboxrelay_events_published_total", "topic", "outbox.event.order")
		inFlight, _ := value(mfs, "outboxrelay_events_in_flight")
		age, _ := value(mfs, "outboxrelay_oldest_unpublished_event_age_seconds")
		if (n == events && inFlight == 0 && age == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		what   string
		name   string
		labels []string
		check  func(v float64) bool
		want   string
	}{
		{"published", "outboxrelay_events_published_total", []string{"topic", "outbox.event.order"}, func(v float64) bool { return v == events }, fmt.Sprint(events)},
		{"latency observations", "outboxrelay_event_latency_seconds", nil, func(v float64) bool { return v == events }, fmt.Sprint(events)},
		{"in flight", "outboxrelay_events_in_flight", nil, func(v float64) bool { return v == 0 }, "0"},
		{"oldest unpublished age", "outboxrelay_oldest_unpublished_event_age_seconds", nil, func(v float64) bool { return v == 0 }, "0"},
		{"source up", "outboxrelay_source_up", nil, func(v float64) bool { return v == 1 }, "1"},
		{"postgres up", "outboxrelay_postgres_up", nil, func(v float64) bool { return v == 1 }, "1"},
		{"slot active", "outboxrelay_replication_slot_active", []string{"slot", name}, func(v float64) bool { return v == 1 }, "1"},
		{"confirmed LSN", "outboxrelay_cdc_confirmed_lsn", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"skipped changes", "outboxrelay_skipped_changes_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"restarts", "outboxrelay_source_restarts_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"kafka client bytes (kprom)", "outboxrelay_kafka_produce_bytes_total", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"build info", "outboxrelay_build_info", nil, func(v float64) bool { return v == 1 }, "1"},
		{"go runtime", "go_goroutines", nil, func(v float64) bool { return v > 0 }, "> 0"},
	} {
		v, ok := value(mfs, c.name, c.labels...)
		if !ok || !c.check(v) {
			t.Errorf("%s: %s%v = %v (present %v), want %s", c.what, c.name, c.labels, v, ok, c.want)
		}
	}
	if n, ok := value(mfs, "outboxrelay_publish_errors_total"); ok && n != 0 {
		t.Errorf("publish errors = %v in a run without any", n)
	}
	if mf := mfs["outboxrelay_event_latency_seconds"]; mf != nil {
		if h := mf.GetMetric()[0].GetHistogram(); h.GetSampleSum() <= 0 {
			t.Errorf("latency histogram sum = %v, want the time the events took", h.GetSampleSum())
		}
	}
	if mf := mfs["outboxrelay_batch_events"]; mf == nil || mf.GetMetric()[0].GetHistogram().GetSampleSum() != events {
		t.Errorf("batch sizes do not add up to the %d events relayed: %v", events, mf)
	}
	if status, body := a.get(t, "/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz = %d:\n%s", status, body)
	}
	checkSlotLag(ctx, t, a, pool, name)
	a.stop(t)
	checkLog(t, a.logs.String(), true)
}

// checkSlotLag checks outboxrelay_replication_slot_lag_bytes against the
// server: it is the server's WAL position less the slot's confirmed one,
// as one probe read them, so confirmed + lag is a position between the
// one the test reads before that probe and the one it reads after. The
// slot's walsender is stopped (SIGSTOP) meanwhile and WAL is written in a
// table of no publication: the relay hears of no new position to confirm,
// so the slot holds that WAL back and the lag must be above 0.
func checkSlotLag(ctx context.Context, t *testing.T, a *appRelay, pool *pgxpool.Pool, slot string) {
	t.Helper()
	var pid int
	if err := pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active`, slot).Scan(&pid); err != nil {
		t.Fatalf("find the walsender of slot %s: %v", slot, err)
	}
	frozen := syscall.Kill(pid, syscall.SIGSTOP) == nil
	if frozen {
		defer func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resume the walsender: %v", err)
			}
		}()
	} else {
		t.Logf("cannot stop the walsender (pid %d); the relay may confirm the new WAL, and a lag of 0 is then right", pid)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE lag_filler AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 5000) g`); err != nil {
		t.Fatal(err)
	}
	before := walInsertLSN(ctx, t, pool)
	// The probe reuses its answer for up to a second: wait for one read
	// after before.
	for deadline := time.Now().Add(10 * time.Second); ; {
		mfs := a.scrape(t)
		after := walInsertLSN(ctx, t, pool)
		lag, okLag := value(mfs, "outboxrelay_replication_slot_lag_bytes", "slot", slot)
		confirmed, okConfirmed := value(mfs, "outboxrelay_replication_slot_confirmed_flush_lsn", "slot", slot)
		if !okLag || !okConfirmed {
			t.Fatalf("slot %s: lag present %v, confirmed_flush_lsn present %v; want both", slot, okLag, okConfirmed)
		}
		if at := confirmed + lag; at >= before {
			if at > after {
				t.Errorf("slot lag %v + confirmed_flush_lsn %v = %v, past the server's WAL position %v read after the scrape", lag, confirmed, at, after)
			}
			if frozen && lag == 0 {
				t.Errorf("slot lag 0 while the slot's walsender was stopped and WAL was written")
			}
			t.Logf("slot lag %v bytes, confirmed_flush_lsn %v, the server's WAL between %v and %v", lag, confirmed, before, after)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot lag %v + confirmed_flush_lsn %v stays below the server's WAL position %v read before the scrapes of the last 10s", lag, confirmed, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// walInsertLSN is the server's WAL insert position, as a number.
func walInsertLSN(ctx context.Context, t *testing.T, pool *pgxpool.Pool) float64 {
	t.Helper()
	var lsn float64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestOpsReadinessFollowsPostgres stops PostgreSQL under a running relay:
// /readyz fails while it is down (and /healthz does not, since a restart
// would not help) and passes again once the relay has reconnected. The
// relay runs at log.level debug with a password in its URL, and no log
// line nor endpoint answer may show it.
func TestOpsReadinessFollowsPostgres(t *testing.T) {
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	adminURL, err := srv.CreateDatabase(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	admin := connectPool(t, adminURL)
	const table, password = "outbox", "Pw-9f2c1e7a-do-not-log"
	createOutbox(t, admin, table)
	for _, sql := range []string{
		`CREATE ROLE relay LOGIN REPLICATION PASSWORD '` + password + `'`,
		`GRANT SELECT ON public.outbox TO relay`,
		`CREATE PUBLICATION relay_pub FOR TABLE public.outbox WITH (publish = 'insert')`,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// localpg trusts local connections, so the server never checks the
	// password; what matters here is that the relay has it and must not
	// show it.
	u, _ := url.Parse(adminURL)
	u.User = url.UserPassword("relay", password)
	_, brokers := testenv.Kafka(t)
	a := startApp(t, map[string]string{
		"postgres.url":           u.String(),
		"outbox.table":           "public." + table,
		"cdc.slot":               "relay_slot",
		"cdc.publication":        "relay_pub",
		"cdc.status_interval":    "100ms",
		"cdc.create_publication": "false",
		"kafka.brokers":          strings.Join(brokers, ","),
		"http.listen":            "127.0.0.1:0",
		"log.level":              "debug",
	})
	c := newCollector(t, brokers, "outbox.event.order")
	workload{table: table, writers: 2, aggregates: 10, events: 50}.write(ctx, t, admin)
	c.waitFor(t, readRows(ctx, t, admin, table), time.Minute)

	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a.waitStatus(t, "/readyz", http.StatusServiceUnavailable, 30*time.Second, "postgres: PostgreSQL does not answer")
	if status, body := a.get(t, "/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz with PostgreSQL stopped = %d, want 200 (a restart would not bring it back):\n%s", status, body)
	}
	if up, _ := value(a.scrape(t), "outboxrelay_postgres_up"); up != 0 {
		t.Errorf("postgres_up = %v with PostgreSQL stopped", up)
	}
	// The status page and its JSON say so too, and are searched for the
	// password below with every other answer.
	for _, path := range []string{"/", "/status"} {
		if status, body := a.get(t, path); status != http.StatusOK || !strings.Contains(body, "PostgreSQL does not answer") {
			t.Errorf("GET %s with PostgreSQL stopped = %d, want 200 saying PostgreSQL does not answer:\n%s", path, status, body)
		}
	}

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	a.waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	// The relay is back: what is committed now is relayed too.
	admin = connectPool(t, adminURL)
	workload{table: table, writers: 2, aggregates: 10, events: 50}.write(ctx, t, admin)
	c.waitFor(t, readRows(ctx, t, admin, table), time.Minute)
	if n, _ := value(a.scrape(t), "outboxrelay_source_restarts_total"); n < 1 {
		t.Errorf("source restarts = %v after PostgreSQL restarted, want at least 1", n)
	}
	a.stop(t)

	logs := a.logs.String()
	checkLog(t, logs, false)
	if !strings.Contains(logs, `relay:xxxxx@`) {
		t.Errorf("the log does not show the redacted URL (relay:xxxxx@...); is the start line gone?")
	}
	for what, text := range map[string]string{"log": logs, "endpoint answers": a.seen.String()} {
		if i := strings.Index(text, password); i >= 0 {
			t.Errorf("the %s shows the password: ...%s...", what, text[max(0, i-200):min(len(text), i+50)])
		}
	}
}
