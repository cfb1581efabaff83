package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestDebeziumHeartbeatActionQuery: heartbeat.action.query runs at every
// heartbeat, as Debezium's CompositeHeartbeat runs DatabaseHeartbeatImpl
// with the scheduled heartbeat (HeartbeatFactory.getScheduledHeartbeat,
// only when heartbeat.interval.ms > 0), on a connection of its own. The
// RDS recipe: an INSERT into a heartbeat table, whose rows grow while the
// outbox is idle; and outbox events still arrive.
func TestDebeziumHeartbeatActionQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL+`;
		CREATE TABLE inventory.heartbeat (id serial PRIMARY KEY, ts timestamptz NOT NULL)`)
	_, brokers := testenv.Kafka(t)
	content := exampleConnector(pgURL, slot, `,
    "heartbeat.interval.ms": "200",
    "heartbeat.action.query": "INSERT INTO inventory.heartbeat (ts) VALUES (now())"`)
	p := runDebeziumBinary(t, "c.json", content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	waitSlotActive(ctx, t, pool, slot)
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM inventory.heartbeat`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	first := count()
	for first == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		first = count()
	}
	if first == 0 {
		t.Fatal("heartbeat.action.query inserted no row in 60 s with heartbeat.interval.ms 200")
	}
	for count() < first+3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := count(); n < first+3 {
		t.Fatalf("the heartbeat table stopped growing at %d rows (from %d)", n, first)
	}
	id := insertOutboxEvent(ctx, t, pool, 1)
	recs := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 1)
	if got := header(recs[0], "id"); got != id {
		t.Errorf("record id %q, want %q", got, id)
	}
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d", code)
	}
	if out := p.out.String(); !strings.Contains(out, "cdc.heartbeat_query") {
		t.Errorf("the relay did not say how it maps heartbeat.action.query:\n%s", out)
	}
}
