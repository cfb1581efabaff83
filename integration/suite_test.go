package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

const partitions = 8

// Features are what a source declares it does beyond what every source
// does, as watermill's pubsub/tests declares an adapter's. A behaviour of
// the suite that needs one skips, saying which, for a source without it.
// Behaviours only one source can have (a replication slot and its
// checkpoint, a standby, the poller's claims and dead-letter table) are
// tested in that source's own tests.
type Features struct {
	// GracefulRestartRepeatsNothing: a graceful stop and start repeats no
	// event, at least once too.
	GracefulRestartRepeatsNothing bool
	// ExactlyOnce: with kafka.delivery exactly_once, a read_committed
	// consumer sees each event once through refused batches, dead letters
	// and restarts.
	ExactlyOnce bool
	// ExactlyOnceKillRepeats is the most events a read_committed consumer
	// may see twice for each SIGKILL with exactly_once.
	ExactlyOnceKillRepeats int
	// SeveralInstances: several instances share one outbox table; the
	// fault behaviours run two and fail them in turn.
	SeveralInstances bool
	// Quarantines: without a dead letter topic, an event that can never
	// be published is set aside in the source's own store (the poller's
	// dead-letter table, after poll.max_attempts) and the rest flows;
	// without it, the relay stops naming the event.
	Quarantines bool
}

// matrixEnv is set by scripts/test for the server matrix's runs: the
// tests that depend on PostgreSQL's major, on the majors besides the
// whole suite's.
const matrixEnv = "OUTBOXRELAY_TEST_MATRIX"

// brokerSide skips, in the server matrix's runs, a behaviour of the Kafka
// side (the broker refusing, failing or fencing), which no PostgreSQL
// major changes: the whole suite runs it once, and the matrix keeps its
// minutes for what the majors do differ in.
func brokerSide(t *testing.T) {
	t.Helper()
	if os.Getenv(matrixEnv) != "" {
		t.Skipf("%s: a behaviour of the Kafka side, the same on every PostgreSQL major; the whole suite runs it", matrixEnv)
	}
}

// requires skips the test for a source that does not declare feature.
func requires(t *testing.T, kind sourceKind, feature string, declared bool) {
	t.Helper()
	if !declared {
		t.Skipf("the %s source does not declare %s", kind.name, feature)
	}
}

// TestSources runs every guarantee against every source.
func TestSources(t *testing.T) {
	// Each subtest has its own database, broker and names; their retries
	// and backoffs wait more than they work, so they share the time with
	// the other waiting tests.
	t.Parallel()
	for _, kind := range sourceKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			t.Run("ConcurrentWritersManyAggregates", func(t *testing.T) { testConcurrentWriters(t, kind) })
			t.Run("LargeTransactions", func(t *testing.T) { testLargeTransactions(t, kind) })
			t.Run("GracefulRestartMidStream", func(t *testing.T) { testGracefulRestart(t, kind) })
			t.Run("KilledMidStream", func(t *testing.T) { testKilledMidStream(t, kind) })
			t.Run("BrokerProduceErrors", func(t *testing.T) { brokerSide(t); testBrokerErrors(t, kind) })
			t.Run("OversizedEventDeadLetter", func(t *testing.T) { brokerSide(t); testOversized(t, kind) })
			t.Run("BatchRefusedNoInnocentDeadLetter", func(t *testing.T) { brokerSide(t); testBatchRefused(t, kind) })
			t.Run("BrokerRefusesOneEventDeadLetter", func(t *testing.T) { brokerSide(t); testBrokerRefusesOne(t, kind) })
			t.Run("BinaryPayloadsByteForByte", func(t *testing.T) { testBinaryPayloads(t, kind) })
			t.Run("PostgresConnectionsDropMidStream", func(t *testing.T) { testPostgresConnectionsDrop(t, kind) })
			t.Run("PostgresUnreachable", func(t *testing.T) { testPostgresUnreachable(t, kind) })
			t.Run("ExactlyOnceRefusedBatch", func(t *testing.T) { brokerSide(t); testExactlyOnceRefusedBatch(t, kind) })
			t.Run("ExactlyOnceKilledFiveTimes", func(t *testing.T) { testExactlyOnceKilledFiveTimes(t, kind) })
			t.Run("ExactlyOnceBrokerRefusesOne", func(t *testing.T) { brokerSide(t); testExactlyOnceBrokerRefusesOne(t, kind) })
			t.Run("ExactlyOnceBatchRefused", func(t *testing.T) { brokerSide(t); testExactlyOnceBatchRefused(t, kind) })
		})
	}
}

// env is one test's database, table, broker and source names.
type env struct {
	kind    sourceKind
	url     string
	pool    *pgxpool.Pool
	table   string
	name    string
	cluster *kfake.Cluster
	brokers []string
}

func newEnv(t *testing.T, kind sourceKind, kopts ...kfake.Opt) *env {
	t.Helper()
	e := &env{kind: kind, url: testenv.Postgres(t), table: "outbox", name: uniqueName(t)}
	e.pool = connectPool(t, e.url)
	createOutbox(t, e.pool, e.table)
	e.cluster, e.brokers = testenv.Kafka(t, append([]kfake.Opt{kfake.DefaultNumPartitions(partitions)}, kopts...)...)
	return e
}

// cdcConfig is the relay binary's configuration for e: source cdc, with
// the slot and the publication named after the test, and extra appended.
func (e *env) cdcConfig(extra string) string {
	return yamlConfig(e.url, e.brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n", e.name, e.name)+extra)
}

func (e *env) start(t *testing.T, rc connector.RunnerConfig, sc sink.Config) *relay {
	t.Helper()
	r := startRelay(t, e.kind.open(t, e.url, e.table, e.name), e.brokers, rc, sc)
	e.kind.ready(context.Background(), t, e.pool, e.name)
	return r
}

func testConcurrentWriters(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind)
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	ctx := context.Background()
	workload{table: e.table, writers: 4, aggregates: 100, events: 5000, txnSize: 3}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if rep.duplicates != 0 {
		t.Errorf("%d duplicates without any failure", rep.duplicates)
	}
}

// testLargeTransactions commits transactions far larger than
// logical_decoding_work_mem (64kB on the test server) and than one batch,
// so events sharing a commit LSN travel in several chunks.
func testLargeTransactions(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind)
	r := e.start(t, connector.RunnerConfig{}, sink.Config{MaxBufferedRecords: 500})
	ctx := context.Background()
	workload{table: e.table, writers: 2, aggregates: 10, events: 6000, txnSize: 3000}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.check(t, rows, partitions)
}

// testGracefulRestart stops the relay while writers are busy and starts a
// new one: nothing is lost, and with a source that confirms exactly what
// Kafka acknowledged, nothing is repeated.
func testGracefulRestart(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind)
	ctx := context.Background()
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	written := make(chan struct{})
	go func() {
		defer close(written)
		workload{table: e.table, writers: 2, aggregates: 20, events: 4000}.write(ctx, t, e.pool)
	}()
	c := newCollector(t, e.brokers, "outbox.event.order")
	// Stop once some, not all, events are through.
	deadline := time.Now().Add(time.Minute)
	for len(c.recs) < 500 && time.Now().Before(deadline) {
		c.poll(ctx)
	}
	r.stop(t)
	r2 := e.start(t, connector.RunnerConfig{}, sink.Config{})
	<-written
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, 2*time.Minute)
	r2.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if kind.features.GracefulRestartRepeatsNothing && rep.duplicates != 0 {
		t.Errorf("%d duplicates after a graceful restart; want none", rep.duplicates)
	}
}

// testBrokerErrors makes the broker fail produce requests, first with
// errors a producer retries: nothing is lost and order holds. Then with one
// it does not retry, which restarts the relay from its checkpoint: nothing
// is lost and every record is routed right, but order is not promised (yet):
// franz-go fails only the refused batch and sends the partition's later
// batches under a new epoch, so they can reach Kafka ahead of the refused
// events, which are then published again after them (docs/guarantees.md).
func testBrokerErrors(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind)
	ctx := context.Background()
	retriable := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: 20})
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	w := workload{table: e.table, writers: 4, aggregates: 40, events: 1600}
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	if retriable.Hits() == 0 {
		t.Fatal("the retriable fault answered no produce request; the test did not exercise it")
	}
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)

	fatal := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: 3})
	w.seqBase = 1600 / 40
	w.write(ctx, t, e.pool)
	rows = readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	if fatal.Hits() == 0 {
		t.Fatal("the fatal fault answered no produce request; the test did not exercise it")
	}
	c.settle(300 * time.Millisecond)
	c.orderKnownBroken = true
	c.check(t, rows, partitions)
}

// testOversized commits an event larger than the broker accepts between
// ordinary ones. Without a dead letter topic the relay stops with an error
// naming it, or, for a source that quarantines, sets it aside in its own
// store and goes on; with one, it goes there and the rest flows.
func testOversized(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	ctx := context.Background()
	var bigID string
	insert := func(agg string, payload string) string {
		var id string
		if err := e.pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'T', $2) RETURNING id::text`, agg, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	big := `{"seq": 2, "blob": "` + strings.Repeat("x", 8000) + `"}`

	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	insert("a", `{"seq": 1}`)
	bigID = insert("a", big)
	if kind.features.Quarantines {
		// Set aside in the source's own store, with the reason; the
		// relay goes on.
		var reason string
		deadline := time.Now().Add(time.Minute)
		for e.pool.QueryRow(ctx, `SELECT reason FROM outbox_dead_letter WHERE event_id = $1`, bigID).Scan(&reason) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("event %s is not in the dead-letter table after a minute", bigID)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(reason, "message.max.bytes") {
			t.Errorf("the dead-letter table's reason %q does not name the broker's limit", reason)
		}
		r.stop(t)
		// The dead letter topic's case needs an event to send there.
		bigID = insert("a", big)
	} else {
		err := r.wait(t, time.Minute)
		var ee *connector.EventError
		if !errors.As(err, &ee) || ee.EventID != bigID || !strings.Contains(err.Error(), "message.max.bytes") {
			t.Fatalf("relay stopped with %v; want an error naming event %s and the broker's limit", err, bigID)
		}
	}

	r = e.start(t, connector.RunnerConfig{DeadLetterTopic: "outbox.deadletter"}, sink.Config{})
	insert("a", `{"seq": 3}`)
	c := newCollector(t, e.brokers, "outbox.event.order", "outbox.deadletter")
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	for _, rec := range c.recs {
		id := header(rec, "id")
		switch {
		case id == bigID && rec.Topic != "outbox.deadletter":
			t.Errorf("oversized event went to %s", rec.Topic)
		case id == bigID:
			if !strings.Contains(header(rec, connector.HeaderError), "too large") && !strings.Contains(header(rec, connector.HeaderError), "limit") {
				t.Errorf("dead letter error header %q does not say why", header(rec, connector.HeaderError))
			}
			if header(rec, connector.HeaderOriginalTopic) != "outbox.event.order" || string(rec.Key) != "a" {
				t.Errorf("dead letter lacks the original topic or key: %q %q", header(rec, connector.HeaderOriginalTopic), rec.Key)
			}
		case rec.Topic != "outbox.event.order":
			t.Errorf("event %s went to %s", id, rec.Topic)
		}
	}
}

// testBatchRefused has the broker refuse a produce request as too large, as
// it does for a whole batch when a topic's limit shrinks. The records in it
// are suspects, not culprits: each is published alone on the next run, and
// none of these ordinary events may end up on the dead letter topic.
// MESSAGE_TOO_LARGE is not retriable, so order is not promised here, for
// the reason testBrokerErrors gives: the partition's later batches can land
// ahead of the refused one, whose events come again after them. (This test
// asserted order until a loaded run showed "event 25 follows event 0".)
func testBatchRefused(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind)
	ctx := context.Background()
	refused := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.MessageTooLarge, Count: 1})
	r := e.start(t, connector.RunnerConfig{DeadLetterTopic: "outbox.deadletter"}, sink.Config{})
	workload{table: e.table, writers: 2, aggregates: 10, events: 300, txnSize: 10}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order", "outbox.deadletter")
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	if refused.Hits() == 0 {
		t.Fatal("the fault refused no produce request; the test exercised nothing")
	}
	c.settle(200 * time.Millisecond)
	for _, rec := range c.recs {
		if rec.Topic == "outbox.deadletter" {
			t.Errorf("event %s went to the dead letter topic (%s) though it is publishable", header(rec, "id"), header(rec, connector.HeaderError))
		}
	}
	c.orderKnownBroken = true
	c.check(t, rows, partitions)
}

// testBrokerRefusesOne: the relay's own size check passes an event (it was
// told a larger limit than the broker's, as after a topic's limit shrinks),
// and the broker refuses it. Published alone, it fails again, so it goes to
// the dead letter topic; its neighbours flow.
func testBrokerRefusesOne(t *testing.T, kind sourceKind) {
	e := newEnv(t, kind, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	ctx := context.Background()
	r := e.start(t, connector.RunnerConfig{DeadLetterTopic: "outbox.deadletter"}, sink.Config{MaxRecordBytes: 1 << 20})
	var bigID string
	for i := 1; i <= 5; i++ {
		payload := fmt.Sprintf(`{"seq": %d}`, i)
		if i == 3 {
			payload = fmt.Sprintf(`{"seq": %d, "blob": "%s"}`, i, strings.Repeat("x", 8000))
		}
		var id string
		if err := e.pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'T', $1) RETURNING id::text`, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			bigID = id
		}
	}
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order", "outbox.deadletter")
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	for _, rec := range c.recs {
		if id := header(rec, "id"); (id == bigID) != (rec.Topic == "outbox.deadletter") {
			t.Errorf("event %s went to %s", id, rec.Topic)
		}
	}
}

// testBinaryPayloads commits bytea payloads that text would mangle (NUL
// bytes, bytes that are not UTF-8) and an empty one beside a NULL one,
// some before the source starts (CDC's snapshot, the poller's backlog) and
// some while it runs. Each record's value must be the column's bytes
// exactly: an empty bytea an empty value, only NULL a null value (a
// tombstone).
func testBinaryPayloads(t *testing.T, kind sourceKind) {
	ctx := context.Background()
	e := newEnv(t, kind)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN payload TYPE bytea USING NULL`); err != nil {
		t.Fatal(err)
	}
	// hex-encoded payloads; nil is NULL.
	payloads := []*string{ptr("00"), ptr("ff00fe80c328"), ptr(""), nil, ptr("7b7d")}
	want := map[string]*string{}
	insert := func(agg string) {
		for _, p := range payloads {
			var id string
			err := e.pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'T', decode($2, 'hex')) RETURNING id::text`,
				agg, p).Scan(&id)
			if err != nil {
				t.Fatal(err)
			}
			want[id] = p
		}
	}
	insert("before")
	c := newCollector(t, e.brokers, "outbox.event.order")
	r := startRelay(t, kind.backlog(t, e), e.brokers, connector.RunnerConfig{}, sink.Config{})
	c.readAtLeast(ctx, t, len(payloads), time.Minute)
	insert("after")
	c.readAtLeast(ctx, t, 2*len(payloads), time.Minute)
	r.stop(t)
	c.settle(200 * time.Millisecond)
	if len(c.recs) != len(want) {
		t.Errorf("%d records for %d rows", len(c.recs), len(want))
	}
	for _, rec := range c.recs {
		id := header(rec, "id")
		p, ok := want[id]
		switch {
		case !ok:
			t.Errorf("record with id %q, which is no row's", id)
		case p == nil && rec.Value != nil:
			t.Errorf("event %s (NULL payload): value %x, want null", id, rec.Value)
		case p != nil && rec.Value == nil:
			t.Errorf("event %s (payload '\\x%s'): value null, want the bytes", id, *p)
		case p != nil && fmt.Sprintf("%x", rec.Value) != *p:
			t.Errorf("event %s: value %x, want %s", id, rec.Value, *p)
		}
	}
}

func ptr[T any](v T) *T { return &v }
