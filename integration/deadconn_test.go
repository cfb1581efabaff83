package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

// The dead-connection suite (issue 17) puts a fault proxy (faultproxy_test.go)
// between the relay and PostgreSQL and makes the connections fail the way a
// NAT gateway or firewall does: silently. The relay runs whole (app.Run,
// configured as the binary is) with bounds of seconds, and each test says
// what a user would see: the records in Kafka, the log, the probes, the
// metrics.

// deadConnEnv is a database, a broker, and a proxy in front of the database.
type deadConnEnv struct {
	url, viaProxy string // the database, directly and through the proxy
	pool          *pgxpool.Pool
	proxy         *faultProxy
	kafka         *testenv.Broker
	brokers       []string
	topics        topics
	name          string // slot and publication
}

// newDeadConnEnv's broker may be shared (testenv.KafkaBroker): the faults
// are PostgreSQL's, and the topics the test's own.
func newDeadConnEnv(t *testing.T) *deadConnEnv {
	t.Helper()
	e := &deadConnEnv{url: testenv.Postgres(t), name: uniqueName(t), kafka: testenv.KafkaBroker(t)}
	e.pool = connectPool(t, e.url)
	createOutbox(t, e.pool, "outbox")
	e.brokers, e.topics = e.kafka.Addrs, ownTopics(t, e.kafka, 0)
	e.proxy, e.viaProxy = newFaultProxy(t, e.url)
	return e
}

// start runs a relay of source ("cdc" or "poll") through the proxy, with
// every bound in seconds, and waits until it is ready.
func (e *deadConnEnv) start(t *testing.T, source string, extra map[string]string) *appRelay {
	t.Helper()
	env := map[string]string{
		"source":                    source,
		"postgres.url":              e.viaProxy,
		"postgres.connect_timeout":  "2s",
		"postgres.query_timeout":    "2s",
		"postgres.keepalive":        "1s",
		"postgres.tcp_user_timeout": "3s",
		"outbox.table":              "public.outbox",
		"cdc.slot":                  e.name,
		"cdc.publication":           e.name,
		"cdc.status_interval":       "500ms",
		"cdc.receive_timeout":       "2s",
		"poll.interval":             "50ms",
		"poll.max_interval":         "200ms",
		"poll.batch_size":           "200",
		"kafka.brokers":             strings.Join(e.brokers, ","),
		"http.listen":               "127.0.0.1:0",
		"http.ready_stall_timeout":  "5s",
		"http.live_stall_timeout":   "8s",
		"log.level":                 "info",
	}
	maps.Copy(env, relayKeys(e.kafka, e.topics))
	for k, v := range extra {
		env[k] = v
	}
	return startApp(t, env)
}

// warned returns the WARN lines of the relay's log that contain text.
func warned(t *testing.T, a *appRelay, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range logLines(t, a.logs.String()) {
		if l["level"] == "WARN" && strings.Contains(l["msg"].(string), text) {
			out = append(out, l)
		}
	}
	return out
}

// waitWarn waits until the relay has logged a WARN containing text.
func waitWarn(t *testing.T, a *appRelay, text string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if w := warned(t, a, text); len(w) > 0 {
			return w[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the relay has not warned %q; its log:\n%s", timeout, text, a.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metric reads one sample from the relay's /metrics.
func (a *appRelay) metric(t *testing.T, name string) float64 {
	t.Helper()
	v, ok := value(a.scrape(t), name)
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	return v
}

// waitMetric waits until ok(the sample of name) holds, and returns it.
func (a *appRelay) waitMetric(t *testing.T, name string, timeout time.Duration, what string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := a.metric(t, name)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %s = %v; want %s", timeout, name, v, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDeadConnCDCIdle drops the connections while the outbox is idle:
// nothing flows, yet the relay notices, because every status update asks
// the server for an answer; the events committed afterwards arrive.
func TestDeadConnCDCIdle(t *testing.T) {
	e := newDeadConnEnv(t)
	a := e.start(t, "cdc", nil)
	ctx := context.Background()
	c := e.topics.collect(t, e.brokers)
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 100}
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, "outbox"), time.Minute)

	e.proxy.drop()
	waitWarn(t, a, "the replication connection is dead", 30*time.Second)
	a.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)
	w2 := w
	w2.seqBase = 100 / 10
	w2.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, "outbox")
	c.waitFor(t, rows, time.Minute)
	if n := a.metric(t, "outboxrelay_source_restarts_total"); n < 1 {
		t.Errorf("source_restarts_total = %v after the dead connection, want at least 1", n)
	}
	a.stop(t)
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)
}

// withParam returns the connection URL u with one more query parameter.
func withParam(t *testing.T, u, key, value string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := parsed.Query()
	q.Set(key, value)
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// TestDeadConnFreeze holds all traffic to PostgreSQL for 20 seconds while
// events are written, then lets it go: whatever the relay made of the
// silence meanwhile, nothing is lost and order holds.
func TestDeadConnFreeze(t *testing.T) {
	// Mostly waiting: it shares its time with the other waiting tests.
	t.Parallel()
	e := newDeadConnEnv(t)
	a := e.start(t, "cdc", nil)
	ctx := context.Background()
	c := e.topics.collect(t, e.brokers)
	written := workload{table: "outbox", writers: 2, aggregates: 20, events: 4000, txnSize: 2}.writeInBackground(ctx, t, e.pool)
	c.readAtLeast(ctx, t, 500, time.Minute)
	e.proxy.freeze()
	time.Sleep(20 * time.Second)
	e.proxy.thaw()
	<-written
	rows := readRows(ctx, t, e.pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	a.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)
	a.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events (%d repeats, at least once); dead-connection warnings: %d",
		rep.records, len(rows), rep.duplicates, len(warned(t, a, "the replication connection is dead")))
}

// TestDeadConnStandbyTakesOver starts a second CDC source on a slot the
// first streams from, as a relay reconnecting while the server still keeps
// its old session would: the second says once, at INFO, that it waits for
// the slot and for which PID, with no WARN per look; when the first stops
// it takes over on its own, and together they relay every event in order.
func TestDeadConnStandbyTakesOver(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	name := uniqueName(t)
	ctx := context.Background()
	cfg := cdc.Config{URL: url, Table: "public.outbox", Slot: name, Publication: name}
	first := startRelay(t, openCDC(t, cfg), brokers, connector.RunnerConfig{}, sink.Config{})
	holder := slotHolder(ctx, t, pool, name)

	var logs syncBuffer
	cfg.StatusInterval = 100 * time.Millisecond
	second, err := cdc.New(cfg, cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		t.Fatal(err)
	}
	standby := startRelay(t, second, brokers, connector.RunnerConfig{}, sink.Config{})
	waitLog := func(text string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(logs.String(), text) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30s the standby has not logged %q:\n%s", text, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog("another session holds the replication slot")
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 200}
	w.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)
	// Several looks later, still said once.
	time.Sleep(3 * time.Second)
	if n := strings.Count(logs.String(), "another session holds the replication slot"); n != 1 {
		t.Errorf("the standby said %d times that it waits; want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("holder_pid=%d", holder)) {
		t.Errorf("the standby's log does not name the holder, PID %d:\n%s", holder, logs.String())
	}

	stopped := time.Now()
	first.stop(t)
	waitLog("replication started")
	t.Logf("the standby streams %s after the first relay stopped", time.Since(stopped).Round(10*time.Millisecond))
	w2 := w
	w2.seqBase = 200 / 10
	w2.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, time.Minute)
	standby.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events (%d repeats)", rep.records, len(rows), rep.duplicates)
	if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the standby logged warnings or errors while it waited:\n%s", logs.String())
	}
}

// TestDeadConnKafkaSilentDrop silences every open connection to the broker
// while a poller relays 10,000 events; new connections work. At least one
// connection is dropped, the Kafka client's request timeouts notice, it
// opens new connections, acknowledgements flow again, and every event
// arrives in order. The time from the drop until acknowledgements flow again is
// logged (it is measured here, not promised: a loaded machine may take
// longer).
func TestDeadConnKafkaSilentDrop(t *testing.T) {
	brokerSide(t)
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	fl := &faultListener{}
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions), kfake.ListenFn(func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		fl.Listener = ln
		return fl, err
	}))
	startRelay(t, openPoller(t, poller.Config{URL: url, Table: "public.outbox", BatchSize: 200}), brokers, connector.RunnerConfig{}, sink.Config{})
	ctx := context.Background()
	written := workload{table: "outbox", writers: 4, aggregates: 100, events: 10000, txnSize: 2}.writeInBackground(ctx, t, pool)
	published := func() int {
		return countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`)
	}
	waitPublished := func(n int, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for published() < n {
			if time.Now().After(deadline) {
				t.Fatalf("after %s only %d of %d events published", timeout, published(), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPublished(1500, time.Minute)
	at := published()
	dropped := fl.drop()
	acceptedAtDrop := fl.count()
	start := time.Now()
	if dropped == 0 {
		t.Fatalf("no broker connection was open to drop with %d events published", at)
	}
	// One claim (200 rows) may have been acknowledged just before the drop.
	waitPublished(at+400, 2*time.Minute)
	// Every connection open at the drop stays silent for good: whatever
	// was acknowledged since came over a connection opened after it.
	reconnected := fl.count() - acceptedAtDrop
	if reconnected == 0 {
		t.Errorf("events were acknowledged after the drop without a new broker connection; the dropped ones were not silenced")
	}
	t.Logf("dropped %d broker connections with %d events published; %d new connections, acknowledgements flowed again after %s",
		dropped, at, reconnected, time.Since(start).Round(100*time.Millisecond))
	<-written
	rows := readRows(ctx, t, pool, "outbox")
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events (%d repeats, at least once)", rep.records, len(rows), rep.duplicates)
}

// TestDeadConnSlotHeldOldestAgeGrows: another session holds the slot and
// confirms nothing, as the server's leftover session of a relay whose
// connection died does until the server notices. The relay waits as a
// standby: /readyz and /healthz pass (waiting is what it should do), the
// readiness body and outboxrelay_standby say standby, source_up and
// outboxrelay_active are 0, and the oldest unpublished event's age grows from what
// PostgreSQL says of the slot, though the relay holds none of the events.
// Once the holder goes, the relay takes over and every event arrives.
func TestDeadConnSlotHeldOldestAgeGrows(t *testing.T) {
	// Mostly waiting: it shares its time with the other waiting tests.
	t.Parallel()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	name := uniqueName(t)
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE PUBLICATION ` + name + ` FOR TABLE outbox WITH (publish = 'insert')`,
		`SELECT pg_create_logical_replication_slot('` + name + `', 'pgoutput')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	holderCfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	holderCfg.RuntimeParams["replication"] = "database"
	holder, err := pgconn.ConnectConfig(ctx, holderCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, holder, name, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + name + "'"},
	}); err != nil {
		t.Fatal(err)
	}

	a := launchApp(t, map[string]string{
		"postgres.url":        url,
		"outbox.table":        "public.outbox",
		"cdc.slot":            name,
		"cdc.publication":     name,
		"cdc.status_interval": "500ms",
		"cdc.receive_timeout": "2s",
		"kafka.brokers":       strings.Join(brokers, ","),
		"http.listen":         "127.0.0.1:0",
		"log.level":           "info",
	})
	a.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second, "source: ok (standby: another session holds the replication slot")
	a.waitMetric(t, "outboxrelay_standby", 10*time.Second, "1 while waiting for the slot", func(v float64) bool { return v == 1 })
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 200}
	w.write(ctx, t, pool)
	age := a.waitMetric(t, "outboxrelay_oldest_unpublished_event_age_seconds", 30*time.Second, "at least 3s while the slot stands still",
		func(v float64) bool { return v >= 3 })
	t.Logf("oldest unpublished event age while the slot is held: %vs", age)
	if status, body := a.get(t, "/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz while waiting for the slot = %d, want 200:\n%s", status, body)
	}
	for _, m := range []string{"outboxrelay_source_up", "outboxrelay_active"} {
		if v := a.metric(t, m); v != 0 {
			t.Errorf("%s = %v while waiting for the slot, want 0", m, v)
		}
	}
	if n := strings.Count(a.logs.String(), "another session holds the replication slot"); n != 1 {
		t.Errorf("the relay said %d times that it waits for the slot; want once", n)
	}

	holder.Close(ctx)
	a.waitMetric(t, "outboxrelay_active", 30*time.Second, "1 once the relay took the slot over", func(v float64) bool { return v == 1 })
	if v := a.metric(t, "outboxrelay_standby"); v != 0 {
		t.Errorf("outboxrelay_standby = %v while streaming, want 0", v)
	}
	rows := readRows(ctx, t, pool, "outbox")
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, rows, time.Minute)
	a.waitMetric(t, "outboxrelay_oldest_unpublished_event_age_seconds", 30*time.Second, "0 once everything is published",
		func(v float64) bool { return v == 0 })
	a.waitMetric(t, "outboxrelay_source_up", 10*time.Second, "1 once streaming", func(v float64) bool { return v == 1 })
	a.stop(t)
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)
	for _, l := range warned(t, a, "") {
		if l["component"] == "cdc" || l["component"] == "runner" {
			t.Errorf("the relay warned while it waited for the slot: %v", l)
		}
	}
}

// TestDeadConnPollListenerAlone silences only the poller's listening
// connection (the last it opens, after the claiming ones). Nothing fails
// on it, and no notification comes: after a quiet query timeout the poller
// checks it with a round trip, warns that it lost it, ends its session on
// the server, and listens on a new one, while the claims go on polling;
// every event arrives.
func TestDeadConnPollListenerAlone(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	proxy, viaProxy := newFaultProxy(t, url)
	var logs syncBuffer
	cfg := poller.Config{URL: viaProxy, Table: "public.outbox", Network: pgsql.Network{QueryTimeout: time.Second}}
	cfg.Interval, cfg.MaxInterval = 50*time.Millisecond, 500*time.Millisecond
	execSQL(t, url, poller.DDL(cfg))
	src, err := poller.New(cfg, poller.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	startRelay(t, src, brokers, connector.RunnerConfig{}, sink.Config{})
	// The poller opens its claiming connections (poll.claims, 2), then
	// its listening one (poller.Source.run). Under load a first attempt
	// can fail and be restarted, so which connections those are is not
	// known in advance: once polling has started and all are open, the
	// newest is the listener.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "polling started") || proxy.open() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the poller has %d connections open (want its two claiming and its listening one):\n%s", proxy.open(), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := proxy.dropNewest(); !ok {
		t.Fatal("the listening connection is already closed")
	}
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "lost the listening connection") {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the poller has not noticed its silent listening connection:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its session, which holds the instance's member lock, would live on
	// the server for good: the poller ends it, so that other instances do
	// not count this one twice.
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "ended the listening sessions whose connections went silent") {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the poller has not ended its silent listening session:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx := context.Background()
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 200}
	w.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, rows, time.Minute)
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)
	if left := countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); left != 0 {
		t.Errorf("%d rows left unpublished", left)
	}
}

// With cdc.takeover_after a standby does not wait out the server's
// wal_sender_timeout for a frozen relay: it ends the walsender whose
// client has not answered for that long and takes the slot. Here the
// frozen relay's session would otherwise live for five minutes.
func TestDeadConnStandbyEndsSilentHolder(t *testing.T) {
	e := newEnv(t, cdcKind)
	pool, brokers, name := e.pool, e.brokers, e.name
	ctx := context.Background()
	cfg := yamlConfig(e.url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 200ms\n  receive_timeout: 5m\n  takeover_after: 2s\n", name, name))
	a := runBinary(t, cfg)
	holder := slotHolder(ctx, t, pool, name)
	b := runBinary(t, cfg)
	waitLog(t, b, "as a standby", 30*time.Second)

	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 200}
	w.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)
	if strings.Contains(b.out.String(), "ended the session holding") {
		t.Fatalf("the standby ended the session of a relay that answers:\n%s", b.out.String())
	}

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }()
	w.seqBase = 200 / 10
	w.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, time.Minute)
	if want := fmt.Sprintf("holder_pid=%d", holder); !strings.Contains(b.out.String(), "ended the session holding the replication slot") || !strings.Contains(b.out.String(), want) {
		t.Errorf("the standby does not say it ended the frozen relay's session (%s):\n%s", want, b.out.String())
	}
	if code := b.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("the successor exited %d after SIGTERM, want 0", code)
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events: %d repeated", rep.records, len(rows), rep.duplicates)
}

// At least once has no fencing: a relay that lost its replication stream
// drops the records it has not sent yet, rather than write them after a
// relay that may have taken over meanwhile, and publishes them again from
// its checkpoint. The broker holds every produce request while the stream
// is cut, so that the producer has records buffered behind the requests in
// flight; once those are answered, the old stream sends nothing more
// before the new one starts, and every event arrives, in order.
func TestLostStreamDropsUnsentRecords(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Room for 1024 records (the default), fewer than the 2000 events: the
	// runner waits for room with a batch in hand, and the source waits for
	// the runner, before its first checkpoint. The cut stream must end
	// both waits, not only a read.
	snk, err := sink.New(sink.Config{Brokers: e.brokers, MaxBufferedRecords: 1024}, sink.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	// The source starts again 2.5-7.5s (5s, randomized by half) after
	// the requests in flight are answered: a window in which only the old
	// stream could send.
	r, err := connector.NewRunner(cdcKind.open(t, e.url, e.table, e.name), snk,
		connector.RunnerConfig{RetryMin: 5 * time.Second, RetryMax: 5 * time.Second}, connector.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := r.Run(runCtx)
		snk.Close()
		done <- err
	}()
	t.Cleanup(func() {
		stop()
		<-done
		if t.Failed() {
			t.Logf("relay log:\n%s", logs.String())
		}
	})
	cdcKind.ready(ctx, t, e.pool, e.name)

	var produces atomic.Int64
	var holding atomic.Bool
	release := make(chan struct{})
	holding.Store(true)
	e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		produces.Add(1)
		if holding.Load() {
			e.cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	w := workload{table: e.table, writers: 2, aggregates: 20, events: 2000, txnSize: 10}
	w.write(ctx, t, e.pool)
	// The walsender has sent everything; give the relay a moment to read
	// it into the producer, behind the held requests.
	deadline := time.Now().Add(30 * time.Second)
	for countRows(t, e.pool, `SELECT count(*) FROM pg_stat_replication WHERE sent_lsn < pg_current_wal_lsn()`) != 0 || produces.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the walsender did not send the events, or the relay produced none (%d requests)", produces.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, e.name); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "dropping the events not yet sent") {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not drop its unsent records after losing its stream:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The runner logs just before it drops the records; let it.
	time.Sleep(500 * time.Millisecond)
	holding.Store(false)
	close(release)
	// The requests in flight are answered; the source starts again 2.5s
	// later at the earliest. Meanwhile the old stream sends nothing.
	time.Sleep(200 * time.Millisecond)
	after := produces.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := produces.Load() - after; n != 0 {
		t.Errorf("%d produce requests after the lost stream's requests in flight were answered and before the source started again; want none", n)
	}
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, time.Minute)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events: %d repeated", rep.records, len(rows), rep.duplicates)
}
