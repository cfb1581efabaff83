package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// createModuleOutboxes makes an outbox table, <schema>.outbox, in a new
// schema for each module.
func createModuleOutboxes(t *testing.T, pool *pgxpool.Pool, schemas ...string) {
	t.Helper()
	for _, schema := range schemas {
		if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		createOutbox(t, pool, schema+".outbox")
	}
}

// Two outbox tables in two schemas, relayed from one slot: every event
// on its own table's topic (routing by aggregate type), each aggregate in
// commit order, nothing lost. The second table is added to outbox.tables
// across a restart, and the relay adds it to the publication it made for
// the first.
func TestCDCSeveralTables(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createModuleOutboxes(t, pool, "sales", "billing")
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
		// This relay's own session must stream: right after a stop, the
		// previous one's walsender may still hold the slot, and rows of a
		// table committed before the relay adds it to the publication are
		// not decoded.
		deadline := time.Now().Add(30 * time.Second)
		for on, _ := src.Streaming(); !on; on, _ = src.Streaming() {
			if time.Now().After(deadline) {
				t.Fatalf("the relay does not stream after 30s:\n%s", logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return r
	}
	c := newCollector(t, brokers, "outbox.event.sale", "outbox.event.invoice")

	r := start("sales.outbox")
	sales := workload{table: "sales.outbox", aggType: "sale", writers: 2, aggregates: 100, events: 2000, txnSize: 2}
	sales.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "sales.outbox"), time.Minute)
	r.stop(t)

	// Rows billing.outbox holds before it joins the publication were
	// never decoded: the relay says how many, and they stay out.
	var early []string
	for i := range 3 {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO billing.outbox (aggregatetype, aggregateid, type, payload) VALUES ('invoice', $1, 'T', '{}') RETURNING id::text`,
			fmt.Sprintf("early-%d", i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		early = append(early, id)
	}
	r = start("sales.outbox", "billing.outbox")
	for _, want := range []string{"added a table to the publication", "the outbox table added to the publication already holds rows", "rows=3"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the relay does not say %q:\n%s", want, logs.String())
		}
	}
	if _, err := pool.Exec(ctx, `DELETE FROM billing.outbox WHERE id = ANY($1::uuid[])`, early); err != nil {
		t.Fatal(err)
	}
	sales.seqBase, sales.events = 2000/100, 20000
	billing := workload{table: "billing.outbox", aggType: "invoice", writers: 2, aggregates: 100, events: 20000, txnSize: 2}
	done := billing.writeInBackground(ctx, t, pool)
	sales.write(ctx, t, pool)
	<-done
	rows := readRows(ctx, t, pool, "sales.outbox", "billing.outbox")
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
	createModuleOutboxes(t, pool, "sales", "billing")
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
	rows := readRows(ctx, t, pool, "sales.outbox", "billing.outbox")
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

// An outbox table with its own columns and routing among outbox.tables:
// billing.outbox names its aggregate id account_id and routes to
// billing.<type> with a type header, while sales.outbox keeps the
// defaults; with either source, every event is on its table's topic,
// keyed by its table's aggregate id column.
func TestSeveralTablesOwnColumnsAndRouting(t *testing.T) {
	for _, source := range []string{"cdc", "poll"} {
		t.Run(source, func(t *testing.T) {
			ctx := context.Background()
			url := testenv.Postgres(t)
			pool := connectPool(t, url)
			createOutbox(t, pool, "outbox")
			for _, sql := range []string{"CREATE SCHEMA billing", strings.Replace(fmt.Sprintf(outboxDDL, "billing.outbox"), "aggregateid", "account_id", 1)} {
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
			name := uniqueName(t)
			extra := fmt.Sprintf(`source: %s
cdc:
  slot: %s
  publication: %s
poll:
  interval: 100ms
outbox:
  tables:
    - public.outbox
    - name: billing.outbox
      columns: {aggregateid: account_id}
      routing: {topic_prefix: billing., type_header: eventType}
`, source, name, name)
			file := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, extra))
			if source == "poll" {
				ddl, err := exec.Command(binary(t), "poll-ddl", "--config", file).Output()
				if err != nil {
					t.Fatalf("outboxrelay poll-ddl: %v", err)
				}
				execSQL(t, url, string(ddl))
			}
			p := startBinary(t, []string{"run", "--config", file})
			if source == "cdc" {
				waitSlotActive(ctx, t, pool, name)
			}
			sales := workload{table: "outbox", aggType: "sale", writers: 1, aggregates: 10, events: 200, txnSize: 2}
			sales.write(ctx, t, pool)
			invoices := map[string]string{} // id -> account
			seq := map[string]int{}
			for i := range 200 {
				account := fmt.Sprintf("acct-%d", i%10)
				seq[account]++
				var id string
				if err := pool.QueryRow(ctx, `INSERT INTO billing.outbox (aggregatetype, account_id, type, payload) VALUES ('invoice', $1, 'InvoiceSent', $2) RETURNING id::text`,
					account, fmt.Sprintf(`{"seq": %d}`, seq[account])).Scan(&id); err != nil {
					t.Fatal(err)
				}
				invoices[id] = account
			}
			rows := readRows(ctx, t, pool, "outbox")
			c := newCollector(t, brokers, "outbox.event.sale")
			c.waitFor(t, rows, time.Minute)
			recs := testenv.Consume(ctx, t, brokers, []string{"billing.invoice"}, len(invoices))
			if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
				t.Errorf("exit code %d after SIGTERM", code)
			}
			c.settle(300 * time.Millisecond)
			c.check(t, rows, partitions)
			last := map[string]int{}
			for _, r := range recs {
				id := header(r, "id")
				account, ok := invoices[id]
				if !ok {
					t.Errorf("record %s on %s is no billing row", id, r.Topic)
					continue
				}
				if string(r.Key) != account || header(r, "eventType") != "InvoiceSent" {
					t.Errorf("billing event %s: key %q, eventType %q; want key %q (account_id) and eventType InvoiceSent", id, r.Key, header(r, "eventType"), account)
				}
				n := payloadSeq(t, string(r.Value))
				if n != last[account]+1 {
					t.Errorf("account %s: event %d follows %d", account, n, last[account])
				}
				last[account] = n
			}
			for _, rec := range c.recs {
				if header(rec, "eventType") != "" {
					t.Errorf("a sales record has the billing table's type header")
					break
				}
			}
		})
	}
}
