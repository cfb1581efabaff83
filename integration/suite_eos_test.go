package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The suite's exactly-once behaviours, for the sources that declare
// Features.ExactlyOnce: the relay binary with kafka.delivery exactly_once,
// read by a read_committed consumer.

const exactlyOnce = "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once"

// eosEnv is a database with an outbox table, a broker, and the binary
// relaying one to the other with exactly_once.
type eosEnv struct {
	pool    *pgxpool.Pool
	kafka   *testenv.Broker
	cluster *kfake.Cluster // with suiteOpts.faults only
	topics  topics
	relay   *proc
}

// eosOpts shape the relay startEOS starts.
type eosOpts struct {
	suiteOpts
	// deadLetter relays to the test's dead letter topic, with a record
	// limit (1 MiB) above what the event topic takes.
	deadLetter bool
}

// startEOS starts the source's relay binary with exactly_once over an
// outbox table of its own and topics of the test's own, and waits until
// it relays what commits from then on.
func startEOS(t *testing.T, kind sourceKind, o eosOpts) *eosEnv {
	t.Helper()
	e := &eosEnv{kafka: suiteBroker(t, o.maxMessageBytes)}
	if o.faults != "" {
		e.cluster = e.kafka.Kfake(t, o.faults)
	}
	url := testenv.Postgres(t)
	e.pool = connectPool(t, url)
	createOutbox(t, e.pool, "outbox")
	e.topics = ownTopics(t, e.kafka, o.maxMessageBytes)
	name := uniqueName(t)
	kind.prepare(t, url)
	env := append([]string{exactlyOnce}, relayEnv(e.kafka, e.topics)...)
	if o.deadLetter {
		env = append(env, "OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC="+e.topics.deadLetter, "OUTBOXRELAY_KAFKA_MAX_RECORD_BYTES=1048576")
	}
	e.relay = runBinary(t, kind.binaryConfig(url, e.kafka.Addrs, name), env...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay log:\n%s", lastLines(e.relay.out.String(), 60))
		}
	})
	kind.ready(context.Background(), t, e.pool, name)
	return e
}

// checkDeadLetter reads until every row is in Kafka and checks that a
// read_committed consumer sees each once, on the dead letter topic only if
// it is dead, and that the source's own record has every row published.
func (e *eosEnv) checkDeadLetter(t *testing.T, kind sourceKind, dead string) {
	t.Helper()
	ctx := context.Background()
	rows := readRows(ctx, t, e.pool, "outbox")
	c := e.topics.collect(t, e.kafka.Addrs, e.topics.event("order"), e.topics.deadLetter)
	c.waitFor(t, rows, time.Minute)
	c.settle(2 * time.Second)
	seen := map[string]int{}
	for _, rec := range c.recs {
		id := header(rec, "id")
		seen[id]++
		if (id == dead) != (rec.Topic == e.topics.deadLetter) {
			t.Errorf("event %s went to %s (%s)", id, rec.Topic, header(rec, connector.HeaderError))
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s read %d times; read_committed should see it once", id, n)
		}
	}
	if kind.unpublished != nil {
		if n := kind.unpublished(t, e.pool); n != 0 {
			t.Errorf("%d rows are not marked published", n)
		}
	}
}

// testExactlyOnceRefusedBatch: a broker that refuses batches with an error
// the producer does not retry, mid-stream. In at-least-once mode the
// partition's later batches may land before the refused events come again
// (testBrokerErrors). With exactly_once the refusal aborts the whole
// transaction, the relay starts again from what the last committed one
// holds, and a read_committed consumer sees every event once, in commit
// order per aggregate.
func testExactlyOnceRefusedBatch(t *testing.T, kind sourceKind) {
	requires(t, kind, "ExactlyOnce", kind.features.ExactlyOnce)
	e := startEOS(t, kind, eosOpts{suiteOpts: suiteOpts{faults: "makes the broker fail produce requests"}})
	ctx := context.Background()
	c := e.topics.collect(t, e.kafka.Addrs, e.topics.event("order"))
	w := workload{table: "outbox", writers: 4, aggregates: 40, events: 1600}
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, "outbox"), 2*time.Minute)

	fatal := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: 3})
	w.seqBase = 1600 / 40
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	if code := e.relay.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if fatal.Hits() == 0 {
		t.Fatal("the fault answered no produce request; the test did not exercise it")
	}
	c.settle(300 * time.Millisecond)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated; a read_committed consumer must see each event once", rep.duplicates)
	}
	if !strings.Contains(e.relay.out.String(), "aborted the Kafka transaction") {
		t.Errorf("the log does not say the transaction was aborted:\n%s", lastLines(e.relay.out.String(), 30))
	}
}

// testExactlyOnceKilledFiveTimes: the five SIGKILLs of killFiveTimes with
// exactly_once. What a killed relay had not committed in Kafka is aborted
// when its successor fences its transactional id (or its transaction times
// out), and the successor resumes after what Kafka committed. A CDC relay
// writes its checkpoint in the Kafka transaction, so a read_committed
// consumer sees nothing twice. A poller instance marks its rows in the
// claim's PostgreSQL transaction just before the Kafka one commits, then
// commits that one: what it had committed in Kafka but not in PostgreSQL
// (one COMMIT round trip) is claimed and published again, the one window
// left open; each kill repeats at most one claim
// (Features.ExactlyOnceKillRepeats).
func testExactlyOnceKilledFiveTimes(t *testing.T, kind sourceKind) {
	requires(t, kind, "ExactlyOnce", kind.features.ExactlyOnce)
	rep := killFiveTimes(t, kind, exactlyOnce)
	if most := 5 * kind.features.ExactlyOnceKillRepeats; rep.duplicates > most {
		t.Errorf("%d events repeated; with exactly_once five kills may repeat at most %d", rep.duplicates, most)
	}
}

// testExactlyOnceBrokerRefusesOne: with exactly_once and a dead letter
// topic, the broker refuses one event that the relay let through (its
// limit is lower than the relay was told). The broker refuses the whole
// batch, naming an event that may be its innocent neighbour, and a refused
// produce leaves the Kafka transaction good only for an abort: so each
// suspect is published alone, in the transaction, and, refused again, goes
// to the dead letter topic in the next one. A read_committed consumer sees
// every event once, the big one on the dead letter topic; the poller marks
// no row as published before its Kafka transaction commits.
func testExactlyOnceBrokerRefusesOne(t *testing.T, kind sourceKind) {
	requires(t, kind, "ExactlyOnce", kind.features.ExactlyOnce)
	e := startEOS(t, kind, eosOpts{deadLetter: true, suiteOpts: suiteOpts{maxMessageBytes: 4096}})
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		payload := fmt.Sprintf(`{"seq": %d}`, i)
		if i == 3 {
			payload = fmt.Sprintf(`{"seq": %d, "blob": "%s"}`, i, strings.Repeat("x", 8000))
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'T', $1)`, payload); err != nil {
			t.Fatal(err)
		}
	}
	var bigID string
	for id, r := range readRows(ctx, t, e.pool, "outbox") {
		if len(r.payload) > 4096 {
			bigID = id
		}
	}
	e.checkDeadLetter(t, kind, bigID)
}

// testExactlyOnceBatchRefused: the broker refuses one produce request of
// publishable events, and the error names whichever event came first. That
// event is published alone after the restart and succeeds: it is no dead
// letter. In a Kafka transaction its success is known only at the commit,
// so its batch is done only then: the poller, which marks its rows once the
// batch is done, must not mark it before the Kafka transaction commits.
func testExactlyOnceBatchRefused(t *testing.T, kind sourceKind) {
	requires(t, kind, "ExactlyOnce", kind.features.ExactlyOnce)
	e := startEOS(t, kind, eosOpts{deadLetter: true, suiteOpts: suiteOpts{faults: "makes the broker refuse a produce request as too large"}})
	refused := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.MessageTooLarge, Count: 1})
	workload{table: "outbox", writers: 2, aggregates: 10, events: 300, txnSize: 10}.write(context.Background(), t, e.pool)
	e.checkDeadLetter(t, kind, "")
	if refused.Hits() == 0 {
		t.Fatal("the fault refused no produce request; the test exercised nothing")
	}
}
