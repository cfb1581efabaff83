package integration

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
)

// TestPollPreparedClaimWaitsForKafka plays the runner's side of a Kafka
// transaction: the claim's Prepare marks its row, which tells the runner
// it may commit; then the source's context ends, as when another claim
// loop fails, and the runner's commit succeeds. The claim must still
// commit its mark: rolled back, the row would be published again, and a
// read_committed consumer would see it twice.
func TestPollPreparedClaimWaitsForKafka(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	src := openPoller(t, poller.Config{URL: url, Table: "public.outbox", Claims: 1})
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a1', 'T', '{}')`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan connector.Batch)
	ran := make(chan error, 1)
	go func() { ran <- src.Run(ctx, out) }()
	var b connector.Batch
	select {
	case b = <-out:
	case <-time.After(30 * time.Second):
		t.Fatal("the poller handed out no batch")
	}
	if err := b.Prepare(context.Background()); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	cancel()
	time.Sleep(100 * time.Millisecond) // the claim sees its context end first
	b.Done(nil)                        // the Kafka transaction committed
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the poller did not stop")
	}
	if n := countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 0 {
		t.Fatalf("the Kafka transaction committed after a successful Prepare, but %d row is unpublished: it will be published again", n)
	}
}
