package integration

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// Two outbox tables in two schemas, relayed from one slot: every event
// on its own table's topic (routing by aggregate type), each aggregate in
// commit order, nothing lost. The second table is added to outbox.tables
// across a restart, and the relay adds it to the publication it made for
// the first.
func TestCDCSeveralTables(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	for _, schema := range []string{"sales", "billing"} {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		createOutbox(t, pool, schema+".outbox")
	}
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	name := uniqueName(t)
	var logs syncBuffer
	start := func(tables ...string) *relay {
		src, err := cdc.New(cdc.Config{URL: url, Tables: tables, Slot: name, Publication: name, StatusInterval: 100 * time.Millisecond},
			cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		r := startRelay(t, src, brokers, connector.RunnerConfig{}, sink.Config{})
		waitSlotActive(ctx, t, pool, name)
		return r
	}
	c := newCollector(t, brokers, "outbox.event.sale", "outbox.event.invoice")

	r := start("sales.outbox")
	sales := workload{table: "sales.outbox", aggType: "sale", writers: 2, aggregates: 100, events: 2000, txnSize: 2}
	sales.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "sales.outbox"), time.Minute)
	r.stop(t)

	r = start("sales.outbox", "billing.outbox")
	if !strings.Contains(logs.String(), "added a table to the publication") {
		t.Errorf("the relay does not say it added billing.outbox to the publication:\n%s", logs.String())
	}
	sales.seqBase, sales.events = 2000/100, 20000
	billing := workload{table: "billing.outbox", aggType: "invoice", writers: 2, aggregates: 100, events: 20000, txnSize: 2}
	done := billing.writeInBackground(ctx, t, pool)
	sales.write(ctx, t, pool)
	<-done
	rows := readRows(ctx, t, pool, "sales.outbox")
	maps.Copy(rows, readRows(ctx, t, pool, "billing.outbox"))
	if len(rows) != 42000 {
		t.Fatalf("%d rows committed, want 42000", len(rows))
	}
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if rep.duplicates != 0 {
		t.Errorf("%d records repeated without any failure", rep.duplicates)
	}
}

// Schema changes while the relay runs. A column added and the payload's
// type changed take effect without a restart, every event as committed. A
// routed column renamed stops the relay at the first event without it,
// with an error naming the column, the table and the event, and the ways
// on; nothing after it is published past it.
func TestCDCSchemaChangesMidStream(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	c := newCollector(t, e.brokers, "outbox.event.order")
	w := workload{table: e.table, writers: 2, aggregates: 10, events: 200}
	step := func(ddl string) {
		t.Helper()
		if ddl != "" {
			if _, err := e.pool.Exec(ctx, ddl); err != nil {
				t.Fatalf("%s: %v", ddl, err)
			}
		}
		w.write(ctx, t, e.pool)
		w.seqBase += 200 / 10
		c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)
	}
	step("")
	step(`ALTER TABLE outbox ADD COLUMN note text DEFAULT 'added mid-stream'`)
	step(`ALTER TABLE outbox ALTER COLUMN payload TYPE text`)
	rows := readRows(ctx, t, e.pool, e.table)
	c.settle(300 * time.Millisecond)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated across the schema changes", rep.duplicates)
	}

	if _, err := e.pool.Exec(ctx, `ALTER TABLE outbox RENAME COLUMN aggregateid TO aggregate_id`); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := e.pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregate_id, type, payload) VALUES ('order', 'agg-0', 'T', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	err := r.wait(t, 30*time.Second)
	var ee *connector.EventError
	if !errors.As(err, &ee) || ee.EventID != id {
		t.Fatalf("relay stopped with %v; want an error naming event %s", err, id)
	}
	for _, want := range []string{`outbox table public.outbox has no column "aggregateid" any more`, "aggregate_id", "outbox.columns", "kafka.dead_letter_topic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	c.settle(300 * time.Millisecond)
	for _, rec := range c.recs {
		if header(rec, "id") == id {
			t.Errorf("event %s, which lacks the aggregate id column, reached Kafka", id)
		}
	}
}
