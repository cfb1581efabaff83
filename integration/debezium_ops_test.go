package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// TestDebeziumInvalidOpFatal: with table.op.invalid.behavior=fatal,
// Debezium's EventRouterDelegate.handleUnexpectedOperation throws on an
// UPDATE of an outbox row ("Unexpected update message received <key>,
// fail.") and the task stops, after the records before it. The relay
// publishes the event committed before the UPDATE, then stops with an
// error naming the updated row; the event committed after it waits in the
// slot. (Debezium's publication, FOR ALL TABLES, publishes updates.)
func TestDebeziumInvalidOpFatal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	_, brokers := testenv.Kafka(t)
	content := exampleConnector(pgURL, slot, `,
    "transforms.outbox.table.op.invalid.behavior": "fatal"`)
	p := runDebeziumBinary(t, "c.json", content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	waitSlotActive(ctx, t, pool, slot)
	before := insertOutboxEvent(ctx, t, pool, 1)
	if _, err := pool.Exec(ctx, `UPDATE inventory.outboxevent SET payload = '{"seq": 10}' WHERE id = $1`, before); err != nil {
		t.Fatal(err)
	}
	after := insertOutboxEvent(ctx, t, pool, 2)
	var afterEnd string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&afterEnd); err != nil {
		t.Fatal(err)
	}
	code := p.exit(t, 90*time.Second)
	if code == 0 {
		t.Errorf("outboxrelay exited with 0 on an UPDATE of an outbox row with table.op.invalid.behavior=fatal")
	}
	out := p.out.String()
	last := p.stopReason(t)
	for _, want := range []string{"outbox event " + before, "UPDATE of a row of outbox table inventory.outboxevent", "table.op.invalid.behavior=fatal"} {
		if !strings.Contains(last, want) {
			t.Errorf("the error the relay stopped with does not say %q: %s", want, last)
		}
	}
	if strings.Contains(out, "restarting from the last checkpoint") {
		t.Errorf("the relay restarted on an UPDATE that fails for good:\n%s", lastLines(out, 10))
	}
	recs := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 1)
	if got := header(recs[0], "id"); got != before {
		t.Errorf("record id %q, want the event committed before the UPDATE, %q", got, before)
	}
	// Nothing after the UPDATE was confirmed: the slot still holds it.
	// The test server commits asynchronously, and decoding reads only
	// flushed WAL: wait until the last commit is flushed.
	waitFlushed(ctx, t, pool, afterEnd)
	var held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'dbz_publication')
		WHERE position($2::bytea IN data) > 0`, slot, []byte(after)).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held == 0 {
		t.Errorf("the event %s committed after the UPDATE is no longer in the slot", after)
	}
}

// waitFlushed waits until the server has flushed its WAL up to lsn, as
// decoding reads only what is flushed and the test servers commit with
// synchronous_commit off.
func waitFlushed(ctx context.Context, t *testing.T, pool *pgxpool.Pool, lsn string) {
	t.Helper()
	for {
		var flushed bool
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, lsn).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		if flushed {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the WAL was not flushed up to %s: %v", lsn, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
