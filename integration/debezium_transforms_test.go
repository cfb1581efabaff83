package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestDebeziumTransformChain runs the binary from a connector JSON that
// chains four of Kafka Connect's transforms after the outbox router, as
// a Connect worker applies them (connect/transforms' RegexRouter,
// InsertHeader, DropHeaders, and Filter with TopicNameMatches): the
// topic renamed, a header added, one dropped, and the events of one
// aggregate type filtered out. The Order events must arrive in commit
// order on the renamed topic with the chain's headers; no record of the
// filtered ones may reach the broker, under any topic; and the slot must
// be confirmed past all of them, the filtered ones counting as published.
func TestDebeziumTransformChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	_, brokers := testenv.Kafka(t)
	chain := `, "transforms": "outbox,route,origin,noType,skipTests",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": "(.*)\\.events",
    "transforms.route.replacement": "outbox.$1",
    "transforms.origin.type": "org.apache.kafka.connect.transforms.InsertHeader",
    "transforms.origin.header": "origin",
    "transforms.origin.value.literal": "orders-service",
    "transforms.noType.type": "org.apache.kafka.connect.transforms.DropHeaders",
    "transforms.noType.headers": "eventType",
    "transforms.skipTests.type": "org.apache.kafka.connect.transforms.Filter",
    "transforms.skipTests.predicate": "isTest",
    "predicates": "isTest",
    "predicates.isTest.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
    "predicates.isTest.pattern": "outbox\\.Test",
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter"`
	// The chain's "transforms" comes after the example's and replaces it,
	// as a later key of a JSON object does for Kafka Connect's parser.
	content := exampleConnector(pgURL, slot, chain)
	p := runDebeziumBinary(t, "c.json", content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))

	for i, aggType := range []string{"Order", "Test", "Order", "Test", "Order"} {
		insertTypedEvent(ctx, t, pool, i, aggType)
	}
	var end pglogrepl.LSN
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	got := testenv.Consume(ctx, t, brokers, []string{"outbox.Order"}, 3)
	for i, r := range got {
		want := fmt.Sprintf(`{"seq": %d}`, []int{0, 2, 4}[i])
		if string(r.Value) != want || header(r, "origin") != "orders-service" || header(r, "eventType") != "" || header(r, "id") == "" {
			t.Errorf("record %d: value %s, headers %v; want %s with headers id and origin=orders-service, no eventType", i, r.Value, r.Headers, want)
		}
	}
	waitConfirmed(ctx, t, pool, slot, end)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d", code)
	}
	for _, topic := range brokerTopics(ctx, t, brokers) {
		if topic != "outbox.Order" && topic != "outboxrelay.checkpoints" {
			t.Errorf("the broker has topic %s; want only outbox.Order and the checkpoints (the Test events are filtered out)", topic)
		}
	}
}

// insertTypedEvent inserts event n of the example's table with the given
// aggregate type, for aggregate 1, so that the events of a topic share a
// partition and arrive in commit order.
func insertTypedEvent(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int, aggType string) {
	t.Helper()
	_, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, $2, $3, 'Created', '2019-05-03 13:31:34.484', $4)`,
		fmt.Sprintf("00000000-0000-4000-8000-%012d", n), aggType, "1", fmt.Sprintf(`{"seq": %d}`, n))
	if err != nil {
		t.Fatal(err)
	}
}

// brokerTopics lists the topics the broker holds, internal ones left out.
func brokerTopics(ctx context.Context, t *testing.T, brokers []string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return details.Names()
}
