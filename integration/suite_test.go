package integration

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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
			t.Run("OversizedForItsTopic", func(t *testing.T) { brokerSide(t); testOversizedForTopic(t, kind) })
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
	cluster *kfake.Cluster // newEnv's, and newSuiteEnv's with suiteOpts.faults
	brokers []string
	kafka   *testenv.Broker // newSuiteEnv's only
	topics  topics
}

// topics are the names of a test's topics.
type topics struct {
	prefix     string // routing.topic_prefix
	deadLetter string // kafka.dead_letter_topic, where a test sets one
	checkpoint string // kafka.checkpoint_topic; empty for the default
}

// defaultTopics are the relay's default names, for a test with a kfake
// cluster of its own.
var defaultTopics = topics{prefix: "outbox.event.", deadLetter: "outbox.deadletter"}

// event is the topic of aggregate type aggType's events.
func (n topics) event(aggType string) string { return n.prefix + aggType }

// ownTopics names the test's topics after it (testenv.TopicPrefix), so
// that it can share a broker with other tests and runs, and creates the
// topic of aggregate type "order", with the suite's partitions, and the
// dead letter topic: a shared broker's default partition count is not the
// suite's, and it may create no topic on its own. maxMessageBytes, if not
// 0, is the event topic's max.message.bytes. The checkpoint topic the
// relay creates itself, compacted.
func ownTopics(t testing.TB, b *testenv.Broker, maxMessageBytes int) topics {
	t.Helper()
	p := testenv.TopicPrefix(t)
	n := topics{prefix: p + "outbox.event.", deadLetter: p + "outbox.deadletter", checkpoint: p + "outboxrelay.checkpoints"}
	var cfg map[string]string
	if maxMessageBytes != 0 {
		cfg = map[string]string{"max.message.bytes": strconv.Itoa(maxMessageBytes)}
	}
	b.CreateTopics(t, partitions, cfg, n.event("order"))
	b.CreateTopics(t, partitions, nil, n.deadLetter)
	return n
}

// suiteBroker is the suite's broker (testenv.KafkaBroker). A kfake
// cluster also takes maxMessageBytes, if not 0, as its message.max.bytes,
// which the relay learns before its first record; a shared broker has
// only the topic's (ownTopics), which the relay learns in the background
// (sink/limits.go).
func suiteBroker(t testing.TB, maxMessageBytes int) *testenv.Broker {
	t.Helper()
	if maxMessageBytes == 0 {
		return testenv.KafkaBroker(t)
	}
	return testenv.KafkaBroker(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(maxMessageBytes)}))
}

// relayKeys are the relay's settings for topics n on broker b, as
// configuration keys: the topic names, and the TLS and SASL of a shared
// broker.
func relayKeys(b *testenv.Broker, n topics) map[string]string {
	keys := map[string]string{"routing.topic_prefix": n.prefix}
	if n.checkpoint != "" {
		keys["kafka.checkpoint_topic"] = n.checkpoint
	}
	s := b.Security
	set := func(key, v string) {
		if v != "" {
			keys[key] = v
		}
	}
	if s.TLS {
		keys["kafka.tls.enabled"] = "true"
		set("kafka.tls.ca_file", s.TLSCAFile)
		set("kafka.tls.cert_file", s.TLSCertFile)
		set("kafka.tls.key_file", s.TLSKeyFile)
		set("kafka.tls.server_name", s.TLSServerName)
	}
	if s.SASLMechanism != "" {
		set("kafka.sasl.mechanism", s.SASLMechanism)
		set("kafka.sasl.username", s.SASLUsername)
		set("kafka.sasl.password", s.SASLPassword)
		// The tests pass on what the broker asks for; whether PLAIN
		// without TLS is wise is the broker's owner's call.
		keys["kafka.allow_plaintext_sasl"] = "true"
	}
	return keys
}

// relayEnv is relayKeys as the binary's environment.
func relayEnv(b *testenv.Broker, n topics) []string {
	var env []string
	for k, v := range relayKeys(b, n) {
		env = append(env, "OUTBOXRELAY_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))+"="+v)
	}
	return env
}

// sinkConfig is the sink's config for e's broker: its seed brokers and,
// on a shared broker, its TLS and SASL.
func (e *env) sinkConfig() sink.Config {
	sc := sink.Config{Brokers: e.brokers}
	if e.kafka != nil {
		sinkSecurity(&sc, e.kafka)
	}
	return sc
}

// sinkSecurity sets sc's TLS and SASL to b's.
func sinkSecurity(sc *sink.Config, b *testenv.Broker) {
	s := b.Security
	sc.TLS = sink.TLS{Enabled: s.TLS, CAFile: s.TLSCAFile, CertFile: s.TLSCertFile, KeyFile: s.TLSKeyFile, ServerName: s.TLSServerName}
	sc.SASL = sink.SASL{Mechanism: s.SASLMechanism, Username: s.SASLUsername, Password: s.SASLPassword}
	sc.AllowPlaintextSASL = s.SASLMechanism != ""
}

// newEnv is an env whose broker is a kfake cluster of its own, made with
// kopts, under the relay's default topic names: for a test that injects
// faults or configures the cluster. On a shared broker it skips.
func newEnv(t *testing.T, kind sourceKind, kopts ...kfake.Opt) *env {
	t.Helper()
	e := &env{kind: kind, url: testenv.Postgres(t), table: "outbox", name: uniqueName(t), topics: defaultTopics}
	e.pool = connectPool(t, e.url)
	createOutbox(t, e.pool, e.table)
	e.cluster, e.brokers = testenv.Kafka(t, append([]kfake.Opt{kfake.DefaultNumPartitions(partitions)}, kopts...)...)
	return e
}

// suiteOpts shape a behaviour's broker and topics.
type suiteOpts struct {
	// maxMessageBytes, if not 0, is the broker's limit (suiteBroker) and
	// the event topic's (ownTopics).
	maxMessageBytes int
	// faults, for a behaviour that injects them, says which: it needs a
	// kfake cluster of its own (e.cluster), and skips on a shared broker
	// before it makes anything.
	faults string
}

// newSuiteEnv is an env for the behavioural suite, which runs on any
// broker (suiteBroker), under topic names of the test's own (ownTopics).
func newSuiteEnv(t *testing.T, kind sourceKind, o suiteOpts) *env {
	t.Helper()
	e := &env{kind: kind, table: "outbox", name: uniqueName(t), kafka: suiteBroker(t, o.maxMessageBytes)}
	if o.faults != "" {
		e.cluster = e.kafka.Kfake(t, o.faults)
	}
	e.url = testenv.Postgres(t)
	e.pool = connectPool(t, e.url)
	createOutbox(t, e.pool, e.table)
	e.brokers = e.kafka.Addrs
	e.topics = ownTopics(t, e.kafka, o.maxMessageBytes)
	return e
}

// collect reads topics from brokers, from their start, and checks them
// against n's topic prefix; with no topics, the events of aggregate type
// "order".
func (n topics) collect(t testing.TB, brokers []string, topics ...string) *collector {
	t.Helper()
	if len(topics) == 0 {
		topics = []string{n.event("order")}
	}
	c := newCollector(t, brokers, topics...)
	c.prefix = n.prefix
	return c
}

// collect is e.topics.collect on e's broker.
func (e *env) collect(t testing.TB, topics ...string) *collector {
	t.Helper()
	return e.topics.collect(t, e.brokers, topics...)
}

// cdcConfig is the relay binary's configuration for e: source cdc, with
// the slot and the publication named after the test, and extra appended.
func (e *env) cdcConfig(extra string) string {
	return yamlConfig(e.url, e.brokers, cdcYAML(e.name)+extra)
}

// start runs the env's source in-process (run) and waits until it relays
// what commits from then on.
func (e *env) start(t *testing.T, rc connector.RunnerConfig, sc sink.Config) *relay {
	t.Helper()
	r := e.run(t, e.kind.open(t, e.url, e.table, e.name), rc, sc)
	e.kind.ready(context.Background(), t, e.pool, e.name)
	return r
}

// run relays src to e's broker in-process, under e's topic prefix (unless
// rc sets one) and with the broker's security.
func (e *env) run(t *testing.T, src connector.Source, rc connector.RunnerConfig, sc sink.Config) *relay {
	t.Helper()
	rc.Routing.TopicPrefix = cmp.Or(rc.Routing.TopicPrefix, e.topics.prefix)
	if e.kafka != nil {
		sinkSecurity(&sc, e.kafka)
	}
	return startRelay(t, src, e.brokers, rc, sc)
}

// namesLimit reports whether s names the broker's limit on a record's
// size: the broker's message.max.bytes, or its topic's max.message.bytes.
func namesLimit(s string) bool {
	return strings.Contains(s, "message.max.bytes") || strings.Contains(s, "max.message.bytes")
}

func testConcurrentWriters(t *testing.T, kind sourceKind) {
	e := newSuiteEnv(t, kind, suiteOpts{})
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	ctx := context.Background()
	workload{table: e.table, writers: 4, aggregates: 100, events: 5000, txnSize: 3}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := e.collect(t)
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
	e := newSuiteEnv(t, kind, suiteOpts{})
	r := e.start(t, connector.RunnerConfig{}, sink.Config{MaxBufferedRecords: 500})
	ctx := context.Background()
	workload{table: e.table, writers: 2, aggregates: 10, events: 6000, txnSize: 3000}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := e.collect(t)
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.check(t, rows, partitions)
}

// testGracefulRestart stops the relay while writers are busy and starts a
// new one: nothing is lost, and with a source that confirms exactly what
// Kafka acknowledged, nothing is repeated.
func testGracefulRestart(t *testing.T, kind sourceKind) {
	e := newSuiteEnv(t, kind, suiteOpts{})
	ctx := context.Background()
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	written := make(chan struct{})
	go func() {
		defer close(written)
		workload{table: e.table, writers: 2, aggregates: 20, events: 4000}.write(ctx, t, e.pool)
	}()
	c := e.collect(t)
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
	e := newSuiteEnv(t, kind, suiteOpts{faults: "makes the broker fail produce requests"})
	ctx := context.Background()
	retriable := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: 20})
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	w := workload{table: e.table, writers: 4, aggregates: 40, events: 1600}
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := e.collect(t)
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
	e := newSuiteEnv(t, kind, suiteOpts{maxMessageBytes: 4096})
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
		if !namesLimit(reason) {
			t.Errorf("the dead-letter table's reason %q does not name the broker's limit", reason)
		}
		r.stop(t)
		// The dead letter topic's case needs an event to send there.
		bigID = insert("a", big)
	} else {
		err := r.wait(t, time.Minute)
		var ee *connector.EventError
		if !errors.As(err, &ee) || ee.EventID != bigID || !namesLimit(err.Error()) {
			t.Fatalf("relay stopped with %v; want an error naming event %s and the broker's limit", err, bigID)
		}
	}

	r = e.start(t, connector.RunnerConfig{DeadLetterTopic: e.topics.deadLetter}, sink.Config{})
	insert("a", `{"seq": 3}`)
	c := e.collect(t, e.topics.event("order"), e.topics.deadLetter)
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	for _, rec := range c.recs {
		id := header(rec, "id")
		switch {
		case id == bigID && rec.Topic != e.topics.deadLetter:
			t.Errorf("oversized event went to %s", rec.Topic)
		case id == bigID:
			if !strings.Contains(header(rec, connector.HeaderError), "too large") && !strings.Contains(header(rec, connector.HeaderError), "limit") {
				t.Errorf("dead letter error header %q does not say why", header(rec, connector.HeaderError))
			}
			if header(rec, connector.HeaderOriginalTopic) != e.topics.event("order") || string(rec.Key) != "a" {
				t.Errorf("dead letter lacks the original topic or key: %q %q", header(rec, connector.HeaderOriginalTopic), rec.Key)
			}
		case rec.Topic != e.topics.event("order"):
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
	e := newSuiteEnv(t, kind, suiteOpts{faults: "makes the broker refuse a produce request as too large"})
	ctx := context.Background()
	refused := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.MessageTooLarge, Count: 1})
	r := e.start(t, connector.RunnerConfig{DeadLetterTopic: e.topics.deadLetter}, sink.Config{})
	workload{table: e.table, writers: 2, aggregates: 10, events: 300, txnSize: 10}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := e.collect(t, e.topics.event("order"), e.topics.deadLetter)
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	if refused.Hits() == 0 {
		t.Fatal("the fault refused no produce request; the test exercised nothing")
	}
	c.settle(200 * time.Millisecond)
	for _, rec := range c.recs {
		if rec.Topic == e.topics.deadLetter {
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
	e := newSuiteEnv(t, kind, suiteOpts{maxMessageBytes: 4096})
	ctx := context.Background()
	r := e.start(t, connector.RunnerConfig{DeadLetterTopic: e.topics.deadLetter}, sink.Config{MaxRecordBytes: 1 << 20})
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
	c := e.collect(t, e.topics.event("order"), e.topics.deadLetter)
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	for _, rec := range c.recs {
		if id := header(rec, "id"); (id == bigID) != (rec.Topic == e.topics.deadLetter) {
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
	e := newSuiteEnv(t, kind, suiteOpts{})
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
	c := e.collect(t)
	r := e.run(t, kind.backlog(t, e), connector.RunnerConfig{}, sink.Config{})
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
