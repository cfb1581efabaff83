package cdc_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

const patternOutboxDDL = `(id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb)`

// runPatternSource runs a source with outbox.table_patterns and returns
// the events it hands on, acknowledged at once.
func runPatternSource(ctx context.Context, t *testing.T, cfg cdc.Config, logs *syncBuffer) <-chan connector.Event {
	t.Helper()
	src, err := cdc.New(cfg, cdc.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan connector.Batch)
	events := make(chan connector.Event, 100)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx, out) }()
	go func() {
		for b := range out {
			for _, e := range b.Events {
				events <- e
			}
			if b.Done != nil {
				b.Done(nil)
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
		close(out)
	})
	return events
}

func nextEvent(ctx context.Context, t *testing.T, events <-chan connector.Event) connector.Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-ctx.Done():
		t.Fatal("timed out waiting for an event")
	}
	return connector.Event{}
}

// TestTablePatternsJoinWhileStreaming: a table created while the source
// streams that matches outbox.table_patterns joins the publication; the
// rows it held before are reported at ERROR with their count (they are
// not in the stream); what it gets afterwards is relayed under its name.
// With cdc.create_publication false the source says what to run instead.
func TestTablePatternsJoinWhileStreaming(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	var logs syncBuffer
	events := runPatternSource(ctx, t, cdc.Config{URL: url, TablePatterns: []string{`sales\.outbox_.*`}, Slot: "pat_slot", Publication: "pat_pub",
		StatusInterval: 200 * time.Millisecond}, &logs)
	waitFor(ctx, t, "the source to say no table matches yet", func() bool {
		return strings.Contains(logs.String(), "outbox.table_patterns match no table yet")
	})
	exec(ctx, t, admin, `CREATE SCHEMA sales`,
		`CREATE TABLE sales.outbox_orders `+patternOutboxDDL,
		`INSERT INTO sales.outbox_orders VALUES ('00000000-0000-4000-8000-000000000001', 'Order', '1', 'Created', '{}')`)
	waitFor(ctx, t, "the new table to join the publication", func() bool {
		return strings.Contains(logs.String(), "added a new table that matches outbox.table_patterns to the publication")
	})
	waitFor(ctx, t, "the row committed before the table joined to be reported at ERROR", func() bool {
		return strings.Contains(logs.String(), `level=ERROR msg="the new table held rows before it joined the publication; those are not relayed" component=cdc table=sales.outbox_orders rows=1`)
	})
	exec(ctx, t, admin, `INSERT INTO sales.outbox_orders VALUES ('00000000-0000-4000-8000-000000000002', 'Order', '2', 'Created', '{}')`)
	if e := nextEvent(ctx, t, events); e.ID != "00000000-0000-4000-8000-000000000002" || e.Table != "sales.outbox_orders" || e.Invalid != nil {
		t.Errorf("event %s of table %s (invalid: %v), want ...0002 of sales.outbox_orders", e.ID, e.Table, e.Invalid)
	}

	var noCreate syncBuffer
	f := false
	runPatternSource(ctx, t, cdc.Config{URL: url, TablePatterns: []string{`billing\..*`}, Slot: "pat_slot2", Publication: "pat_pub2",
		CreatePublication: &f, StatusInterval: 200 * time.Millisecond}, &noCreate)
	exec(ctx, t, admin, `CREATE PUBLICATION pat_pub2 WITH (publish = 'insert')`)
	waitFor(ctx, t, "the second source to stream", func() bool { return strings.Contains(noCreate.String(), "replication started") })
	exec(ctx, t, admin, `CREATE SCHEMA billing`, `CREATE TABLE billing.outbox `+patternOutboxDDL)
	waitFor(ctx, t, "the source to say the table is not in its publication", func() bool {
		return strings.Contains(noCreate.String(), `level=ERROR msg="a table matches outbox.table_patterns but is not in the publication, and cdc.create_publication is false`)
	})
	if !strings.Contains(noCreate.String(), `fix="ALTER PUBLICATION \"pat_pub2\" ADD TABLE \"billing\".\"outbox\""`) {
		t.Errorf("the ERROR does not give the statement to run:\n%s", noCreate.String())
	}
}
