package integration

import (
	"context"
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
