package integration

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// outboxIDs returns the ids of the rows in the outbox table.
func outboxIDs(ctx context.Context, t testing.TB, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT id::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// insertEvents commits n events, one a transaction, and returns their ids.
func insertEvents(ctx context.Context, t testing.TB, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'T', '{}') RETURNING id::text`,
			aggID(i%5)).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestCDCCleanupDeletesOnlyAcknowledged runs the relay binary with
// cdc.cleanup. Rows whose events Kafka acknowledged are deleted once
// older than the retention. While the broker refuses the events (they
// are published, not acknowledged), cleanup keeps running and deletes
// none of their rows; the relay is then killed (SIGKILL) between the
// publish and any delete, and after the restart every event reaches
// Kafka and only then are the rows deleted. A row missing from the table
// is, at every look, an event already in Kafka.
func TestCDCCleanupDeletesOnlyAcknowledged(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	cluster, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	ctx := context.Background()
	cfg := yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 1s\n"+
		"  cleanup:\n    enabled: true\n    retention: 1s\n    interval: 200ms\n    batch_size: 7\n", name, name))
	p := runBinary(t, cfg)
	waitSlotActive(ctx, t, pool, name)
	c := newCollector(t, brokers, "outbox.event.order")

	// deletedAreInKafka fails the test if a row gone from the table has
	// no record in Kafka. The table is read first: a row deleted by then
	// was acknowledged before its delete, so its record is readable now.
	deletedAreInKafka := func(written []string) (deleted int) {
		t.Helper()
		present := outboxIDs(ctx, t, pool)
		var gone []string
		for _, id := range written {
			if !present[id] {
				gone = append(gone, id)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			missing := 0
			for _, id := range gone {
				if c.ids[id] == 0 {
					missing++
				}
			}
			if missing == 0 {
				return len(gone)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d rows were deleted whose events are not in Kafka", missing)
			}
			c.poll(ctx)
		}
	}
	waitDeleted := func(written []string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for deletedAreInKafka(written) < len(written) {
			if time.Now().After(deadline) {
				t.Fatalf("after a minute %d of %d acknowledged rows are still in the table", len(written)-deletedAreInKafka(written), len(written))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Acknowledged rows go, after the retention.
	first := insertEvents(ctx, t, pool, 40)
	waitDeleted(first)

	// The broker refuses the topic's records: published, never
	// acknowledged. Cleanup runs on; none of these rows may go.
	refuse := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "outbox.event.order", Err: kerr.NotLeaderForPartition, Count: -1})
	second := insertEvents(ctx, t, pool, 30)
	if err := refuse.Wait(ctx, 3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the retention thrice, cleanup's interval fifteen times
	if n := deletedAreInKafka(second); n != 0 {
		t.Fatalf("%d rows deleted while the broker refused their events", n)
	}
	if len(outboxIDs(ctx, t, pool)) != len(second) {
		t.Fatal("rows deleted while the broker refused their events")
	}
	p.signal(t, syscall.SIGKILL, 10*time.Second)
	if n := deletedAreInKafka(second); n != 0 {
		t.Fatalf("%d unacknowledged rows deleted by the time the relay was killed", n)
	}

	refuse.Remove()
	runBinary(t, cfg)
	waitDeleted(second)
	for _, id := range append(first, second...) {
		if c.ids[id] == 0 {
			t.Errorf("event %s is not in Kafka", id)
		}
	}
}
