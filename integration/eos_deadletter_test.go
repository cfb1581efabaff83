package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// eosDeadLetterRelay starts the relay binary, the CDC relay or the poller,
// with exactly_once and a dead letter topic, over an outbox table of its
// own and a broker made with opts.
func eosDeadLetterRelay(t *testing.T, poll bool, opts ...kfake.Opt) (*pgxpool.Pool, *kfake.Cluster, []string, *proc) {
	t.Helper()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	cluster, brokers := testenv.Kafka(t, opts...)
	slot := uniqueName(t)
	cfg := yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n", slot, slot))
	if poll {
		applyBinaryPollDDL(t, url)
		cfg = yamlConfig(url, brokers, "source: poll\npoll:\n  interval: 100ms\n")
	}
	p := runBinary(t, cfg, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once", "OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC=outbox.deadletter",
		"OUTBOXRELAY_KAFKA_MAX_RECORD_BYTES=1048576")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay log:\n%s", lastLines(p.out.String(), 60))
		}
	})
	if !poll {
		waitSlotActive(context.Background(), t, pool, slot)
	}
	return pool, cluster, brokers, p
}

// checkEOSDeadLetter reads until every row is in Kafka and checks that a
// read_committed consumer sees each once, on the dead letter topic only if
// it is dead, and that the poller marked every row.
func checkEOSDeadLetter(t *testing.T, pool *pgxpool.Pool, brokers []string, poll bool, dead string) {
	t.Helper()
	ctx := context.Background()
	rows := readRows(ctx, t, pool, "outbox")
	c := newCollector(t, brokers, "outbox.event.order", "outbox.deadletter")
	c.waitFor(t, rows, time.Minute)
	c.settle(2 * time.Second)
	seen := map[string]int{}
	for _, rec := range c.recs {
		id := header(rec, "id")
		seen[id]++
		if (id == dead) != (rec.Topic == "outbox.deadletter") {
			t.Errorf("event %s went to %s (%s)", id, rec.Topic, header(rec, connector.HeaderError))
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s read %d times; read_committed should see it once", id, n)
		}
	}
	if poll {
		if n := countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 0 {
			t.Errorf("%d rows are not marked published", n)
		}
	}
}

// TestExactlyOnceBrokerRefusesOne: with exactly_once and a dead letter
// topic, the broker refuses one event that the relay let through (its
// limit is lower than the relay was told). The broker refuses the whole
// batch, naming an event that may be its innocent neighbour, and a
// refused produce leaves the Kafka transaction good only for an abort: so
// each suspect is published alone, in the transaction, and, refused
// again, goes to the dead letter topic in the next one. A read_committed
// consumer sees every event once, the big one on the dead letter topic;
// the poller marks no row as published before its Kafka transaction
// commits.
func TestExactlyOnceBrokerRefusesOne(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(map[bool]string{false: "cdc", true: "poll"}[poll], func(t *testing.T) {
			t.Parallel()
			pool, _, brokers, _ := eosDeadLetterRelay(t, poll, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
			ctx := context.Background()
			for i := 1; i <= 5; i++ {
				payload := fmt.Sprintf(`{"seq": %d}`, i)
				if i == 3 {
					payload = fmt.Sprintf(`{"seq": %d, "blob": "%s"}`, i, strings.Repeat("x", 8000))
				}
				if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'T', $1)`, payload); err != nil {
					t.Fatal(err)
				}
			}
			var bigID string
			rows := readRows(ctx, t, pool, "outbox")
			for id, r := range rows {
				if len(r.payload) > 4096 {
					bigID = id
				}
			}
			checkEOSDeadLetter(t, pool, brokers, poll, bigID)
		})
	}
}

// TestExactlyOnceBatchRefused: the broker refuses one produce request of
// publishable events, and the error names whichever event came first. That
// event is published alone after the restart and succeeds: it is no dead
// letter. In a Kafka transaction its success is known only at the commit,
// so its batch is done only then: the poller, which marks its rows once the
// batch is done, must not mark it before the Kafka transaction commits.
func TestExactlyOnceBatchRefused(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(map[bool]string{false: "cdc", true: "poll"}[poll], func(t *testing.T) {
			t.Parallel()
			pool, cluster, brokers, _ := eosDeadLetterRelay(t, poll)
			refused := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.MessageTooLarge, Count: 1})
			workload{table: "outbox", writers: 2, aggregates: 10, events: 300, txnSize: 10}.write(context.Background(), t, pool)
			checkEOSDeadLetter(t, pool, brokers, poll, "")
			if refused.Hits() == 0 {
				t.Fatal("the fault refused no produce request; the test exercised nothing")
			}
		})
	}
}
