package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestBadInputManyTopics: user data that names
// a topic per row must not grow the relay without bound. 20,000 events,
// each with an aggregate type of its own and so a topic of its own, all
// reach Kafka, and the relay stays under 128 MiB (its peak RSS) with a
// /metrics page under 1 MB. Before the fix the relay took 451 MB and
// /metrics 3 MB (40,173 series, two per topic).
func TestBadInputManyTopics(t *testing.T) {
	const (
		topics     = 20000
		maxRSS     = 128 << 20
		maxMetrics = 1 << 20
		prefix     = "many."
	)
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	name := uniqueName(t)
	createOutbox(t, pool, name)
	// One partition a topic, as Kafka creates a topic on first use
	// (num.partitions); franz-go keeps state for each partition.
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(1))
	cfg := yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: %s\ncdc:\n  slot: %s\n  publication: %s\nrouting:\n  topic_prefix: %s\n",
		name, name, name, prefix))
	p := runBinary(t, cfg)
	ep := binaryEndpoint(t, p)
	ep.waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	start := time.Now()
	// One transaction: the relay sees them as fast as it can take them.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload)
		SELECT 'type' || i, 'agg-' || i, 'created', jsonb_build_object('n', i) FROM generate_series(1, %d) AS i`,
		tableIdent(name), topics)); err != nil {
		t.Fatal(err)
	}
	records := waitTopicsWithPrefix(t, brokers, prefix, topics, 5*time.Minute)
	t.Logf("%d topics hold %d records after %s", topics, records, time.Since(start).Round(time.Millisecond))

	status, body := ep.get(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", status)
	}
	series := 0
	for _, l := range strings.Split(body, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			series++
		}
	}
	t.Logf("/metrics: %d bytes, %d series", len(body), series)
	if len(body) >= maxMetrics {
		t.Errorf("/metrics is %d bytes after %d topics, want under %d: per-topic series must be bounded (metrics.max_topics)", len(body), topics, maxMetrics)
	}
	// The topics past the bound are counted together, not lost.
	mfs := ep.scrape(t)
	var published float64
	for _, m := range mfs["outboxrelay_events_published_total"].GetMetric() {
		published += m.GetCounter().GetValue()
	}
	if published < topics {
		t.Errorf("outboxrelay_events_published_total sums to %v over its series, want at least %d", published, topics)
	}
	if _, ok := value(mfs, "outboxrelay_events_published_total", "topic", "(other)"); !ok {
		t.Errorf("no outboxrelay_events_published_total{topic=\"(other)\"} after %d topics", topics)
	}

	hwm := peakRSS(t, p)
	t.Logf("relay peak RSS (VmHWM): %.1f MiB", float64(hwm)/(1<<20))
	if hwm >= maxRSS {
		t.Errorf("the relay's peak RSS was %.1f MiB relaying to %d topics, want under %d MiB", float64(hwm)/(1<<20), topics, maxRSS>>20)
	}
}

// TestBadInputTopicPattern: with routing.topic_pattern, an event whose
// topic falls outside it goes to the dead letter topic with a reason
// naming the topic and the pattern, and the events inside it flow.
func TestBadInputTopicPattern(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	name := uniqueName(t)
	createOutbox(t, pool, name)
	_, brokers := testenv.Kafka(t)
	const dlt = "outbox.dead-letter"
	cfg := yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: %s\ncdc:\n  slot: %s\n  publication: %s\nrouting:\n  topic_pattern: 'outbox\\.event\\.(order|invoice)'\n",
		name, name, name))
	p := runBinary(t, cfg, "OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC="+dlt)
	ep := binaryEndpoint(t, p)
	ep.waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	var badID string
	if err := pool.QueryRow(ctx, fmt.Sprintf(`WITH ins AS (INSERT INTO %[1]s (aggregatetype, aggregateid, type, payload) VALUES
		('order', 'o-1', 'created', '{"n":1}'),
		('orders', 'x-1', 'created', '{"n":2}'),
		('invoice', 'i-1', 'created', '{"n":3}') RETURNING id, aggregatetype)
		SELECT id::text FROM ins WHERE aggregatetype = 'orders'`, tableIdent(name))).Scan(&badID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recs := testenv.Consume(wctx, t, brokers, []string{"outbox.event.order", "outbox.event.invoice", dlt}, 3)
	byTopic := map[string][]*kgo.Record{}
	for _, r := range recs {
		byTopic[r.Topic] = append(byTopic[r.Topic], r)
	}
	if n := len(byTopic["outbox.event.order"]) + len(byTopic["outbox.event.invoice"]); n != 2 {
		t.Errorf("%d events inside the pattern reached their topics, want 2: %v", n, byTopic)
	}
	dead := byTopic[dlt]
	if len(dead) != 1 {
		t.Fatalf("%d records on the dead letter topic, want the one event outside the pattern", len(dead))
	}
	if id := header(dead[0], "id"); id != badID {
		t.Errorf("the dead letter is event %s, want %s", id, badID)
	}
	reason := header(dead[0], connector.HeaderError)
	for _, want := range []string{"outbox.event.orders", "routing.topic_pattern", `outbox\.event\.(order|invoice)`} {
		if !strings.Contains(reason, want) {
			t.Errorf("the dead letter's %s header %q does not name %q", connector.HeaderError, reason, want)
		}
	}
}

// waitTopicsWithPrefix waits until want topics whose name starts with
// prefix hold a record each. It reads end offsets, not records: 20,000
// topics are too many to consume in reasonable time. It counts topics, not
// records, because a relay that restarts from its checkpoint publishes
// some events again, as at-least-once delivery may.
func waitTopicsWithPrefix(t *testing.T, brokers []string, prefix string, want int, timeout time.Duration) (records int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		offs, err := adm.ListEndOffsets(ctx)
		cancel()
		topics, records := 0, 0
		if err == nil {
			for topic, ps := range offs {
				if !strings.HasPrefix(topic, prefix) {
					continue
				}
				n := 0
				for _, o := range ps {
					if o.Err == nil {
						n += int(o.Offset)
					}
				}
				if n > 0 {
					topics++
				}
				records += n
			}
		}
		if topics >= want {
			return records
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d of %d topics named %s* hold a record (last error: %v)", timeout, topics, want, prefix, err)
		}
		time.Sleep(time.Second)
	}
}
