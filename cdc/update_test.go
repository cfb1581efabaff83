package cdc_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestOnUpdateFailNeedsUpdates: cdc.on_update fail cannot see an UPDATE
// through a publication that publishes only inserts, so such a
// publication is refused at start with the statement that fixes it; one
// the source creates publishes updates.
func TestOnUpdateFailNeedsUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	exec(ctx, t, admin,
		createOutbox,
		`CREATE PUBLICATION upd_inserts FOR TABLE outbox WITH (publish = 'insert')`)
	run := func(pub string) error {
		src, err := cdc.New(cdc.Config{URL: url, Slot: "upd_slot", Publication: pub, OnUpdate: cdc.UpdateFail})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		out := make(chan connector.Batch)
		done := make(chan error, 1)
		go func() { done <- src.Run(runCtx, out) }()
		select {
		case err := <-done:
			return err
		case <-time.After(3 * time.Second):
			stop()
			return <-done
		}
	}
	err := run("upd_inserts")
	if !connector.IsPermanent(err) || !strings.Contains(err.Error(), `ALTER PUBLICATION "upd_inserts" SET (publish = 'insert, update')`) {
		t.Errorf("a publication without updates: error %v, want a permanent one naming the ALTER PUBLICATION", err)
	}
	if err := run("upd_created"); err != nil {
		t.Errorf("a publication the source creates: %v", err)
	}
	var update bool
	if err := admin.QueryRow(ctx, `SELECT pubupdate FROM pg_publication WHERE pubname = 'upd_created'`).Scan(&update); err != nil || !update {
		t.Errorf("the publication the source created publishes updates: %t (%v), want true", update, err)
	}
}

// TestOnUpdateFailAfterABacklog: an UPDATE read from a backlog, whose
// transactions the stream hands on several to a batch, still comes after
// every event committed before it, each batch of those with its Done, and
// the refused event names the UPDATE.
func TestOnUpdateFailAfterABacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	exec(ctx, t, admin, createOutbox)
	src, err := cdc.New(cdc.Config{URL: url, Slot: "upd_backlog_slot", Publication: "upd_backlog_pub", OnUpdate: cdc.UpdateFail})
	if err != nil {
		t.Fatal(err)
	}
	run := func(receive func(out <-chan connector.Batch)) {
		t.Helper()
		runCtx, stop := context.WithCancel(ctx)
		out := make(chan connector.Batch)
		done := make(chan error, 1)
		go func() { done <- src.Run(runCtx, out) }()
		receive(out)
		stop()
		if err := <-done; err != nil && runCtx.Err() == nil {
			t.Errorf("source: %v", err)
		}
	}
	// The first run makes the slot and the publication.
	run(func(<-chan connector.Batch) { waitForSlot(ctx, t, admin, "upd_backlog_slot") })
	const n = 30
	for i := range n {
		insertEvent(ctx, t, admin, strconv.Itoa(i))
	}
	exec(ctx, t, admin, `UPDATE outbox SET payload = '{"changed": true}' WHERE aggregateid = '7'`)
	time.Sleep(backlogAge)
	run(func(out <-chan connector.Batch) {
		next, most := 0, 0
		for {
			select {
			case b := <-out:
				most = max(most, len(b.Events))
				for _, e := range b.Events {
					if e.Invalid != nil {
						if next != n || !strings.Contains(e.Invalid.Error(), "UPDATE of a row of outbox table") {
							t.Fatalf("after %d of %d events: refused event %v, want one naming the UPDATE after all of them", next, n, e.Invalid)
						}
						if most < 2 {
							t.Errorf("no batch held more than one of the backlog's transactions")
						}
						return
					}
					if e.AggregateID != strconv.Itoa(next) {
						t.Fatalf("event of aggregate %s, want %d next", e.AggregateID, next)
					}
					next++
				}
				if b.Done == nil {
					t.Fatalf("a batch of %d whole transactions without a Done", len(b.Events))
				}
				b.Done(nil)
			case <-ctx.Done():
				t.Fatalf("%d of %d events, and no refused UPDATE", next, n)
			}
		}
	})
}
