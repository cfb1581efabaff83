package integration

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os/exec"
	"strings"
	"syscall"
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

// The poller with two outbox tables and two instances, one of them killed
// mid-stream: each instance polls both tables, and every event reaches
// its topic, each aggregate in order once repeats are dropped.
func TestPollSeveralTablesTwoInstances(t *testing.T) {
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
	file := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers,
		"source: poll\noutbox:\n  tables: [sales.outbox, billing.outbox]\npoll:\n  interval: 100ms\n  batch_size: 500\n"))
	ddl, err := exec.Command(binary(t), "poll-ddl", "--config", file).Output()
	if err != nil {
		t.Fatalf("outboxrelay poll-ddl: %v", err)
	}
	for _, want := range []string{`"sales"."outbox_dead_letter"`, `"billing"."outbox_dead_letter"`} {
		if !strings.Contains(string(ddl), want) {
			t.Fatalf("poll-ddl does not ready both tables (no %s):\n%s", want, ddl)
		}
	}
	execSQL(t, url, string(ddl))

	run := func() *proc { return startBinary(t, []string{"run", "--config", file}) }
	p1, p2 := run(), run()
	sales := workload{table: "sales.outbox", aggType: "sale", writers: 2, aggregates: 100, events: 10000, txnSize: 2}
	billing := workload{table: "billing.outbox", aggType: "invoice", writers: 2, aggregates: 100, events: 10000, txnSize: 2}
	done := billing.writeInBackground(ctx, t, pool)
	written := sales.writeInBackground(ctx, t, pool)
	c := newCollector(t, brokers, "outbox.event.sale", "outbox.event.invoice")
	c.readAtLeast(ctx, t, 3000, time.Minute)
	p1.signal(t, syscall.SIGKILL, 10*time.Second)
	p1 = run()
	<-done
	<-written
	rows := readRows(ctx, t, pool, "sales.outbox")
	maps.Copy(rows, readRows(ctx, t, pool, "billing.outbox"))
	if len(rows) != 20000 {
		t.Fatalf("%d rows committed, want 20000", len(rows))
	}
	c.waitFor(t, rows, 2*time.Minute)
	for i, p := range []*proc{p1, p2} {
		if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
			t.Errorf("instance %d: exit code %d after SIGTERM, want 0", i+1, code)
		}
		for _, table := range []string{"table=sales.outbox", "table=billing.outbox"} {
			if !strings.Contains(p.out.String(), "polling started") || !strings.Contains(p.out.String(), table) {
				t.Errorf("instance %d did not poll %s:\n%s", i+1, table, p.out.String())
			}
		}
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	for _, table := range []string{"sales.outbox", "billing.outbox"} {
		if left := countRows(t, pool, `SELECT count(*) FROM `+table+` WHERE published_at IS NULL`); left != 0 {
			t.Errorf("%d rows of %s left unpublished", left, table)
		}
	}
	t.Logf("%d records for %d events: %d repeated after SIGKILL", rep.records, len(rows), rep.duplicates)
}
