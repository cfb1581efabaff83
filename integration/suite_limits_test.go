package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// topicLimit is the event topic's own max.message.bytes in
// testOversizedForTopic: far below the broker's (1 MiB by default).
const topicLimit = 4096

// testOversizedForTopic: the event topic alone has a max.message.bytes,
// far below the broker's, as on a managed cluster. The relay reads the
// broker's limit before its first record and the topic's own in the
// background, so the first records go out under the broker's: a small
// event and an oversized one committed together share a batch, which the
// broker refuses whole. Without a dead letter topic the relay must end up
// naming the oversized event, never the small one beside it: the CDC
// relay stops with an error naming it; the poller moves it alone to its
// dead-letter table, charges none of the small events an attempt, and
// they all arrive.
func testOversizedForTopic(t *testing.T, kind sourceKind) {
	e := &env{kind: kind, table: "outbox", name: uniqueName(t), kafka: testenv.KafkaBroker(t)}
	e.url = testenv.Postgres(t)
	e.pool = connectPool(t, e.url)
	createOutbox(t, e.pool, e.table)
	e.brokers = e.kafka.Addrs
	e.topics = ownTopics(t, e.kafka, topicLimit)
	ctx := context.Background()
	if !e.kafka.Shared() {
		// In-process the lookup of the topic's limit beats the first batch
		// most times; a refused first lookup (the relay asks again a second
		// later) makes the batch go out under the broker's limit every
		// time, as it does in some runs on a broker elsewhere.
		e.kafka.Kfake(t, "refuses the first lookup of the topic's config").Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: e.topics.event("order"), Err: kerr.RequestTimedOut})
	}

	// A linger lets the records of one transaction share a batch, as they
	// do under load.
	r := e.start(t, connector.RunnerConfig{}, sink.Config{Linger: 50 * time.Millisecond})
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(payload string) string {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'T', $1) RETURNING id::text`, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	small := []string{insert(`{"seq": 1}`), insert(`{"seq": 2}`)}
	bigID := insert(`{"seq": 3, "blob": "` + strings.Repeat("x", 2*topicLimit) + `"}`)
	small = append(small, insert(`{"seq": 4}`))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if !kind.features.Quarantines {
		err := r.wait(t, time.Minute)
		var ee *connector.EventError
		if !errors.As(err, &ee) || ee.EventID != bigID || !namesLimit(err.Error()) {
			t.Fatalf("relay stopped with %v; want an error naming the oversized event %s and the limit, not one of the small events %v", err, bigID, small)
		}
		return
	}
	deadline := time.Now().Add(time.Minute)
	for countRows(t, e.pool, `SELECT count(*) FROM outbox_dead_letter WHERE event_id::text = $1`, bigID) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("event %s is not in the dead-letter table after a minute", bigID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows := readRows(ctx, t, e.pool, e.table)
	c := e.collect(t)
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	if n := countRows(t, e.pool, `SELECT count(*) FROM outbox_dead_letter WHERE event_id::text <> $1`, bigID); n != 0 {
		t.Errorf("%d small events moved to the dead-letter table beside the oversized one", n)
	}
	for _, id := range small {
		if _, ok := rows[id]; !ok {
			t.Errorf("small event %s is not among the rows the relay published", id)
		}
	}
	if n := countRows(t, e.pool, `SELECT count(*) FROM outbox WHERE id::text = ANY($1) AND publish_attempts > 0`, small); n != 0 {
		t.Errorf("%d small events were charged a failed attempt for the oversized one's refusal", n)
	}
}
