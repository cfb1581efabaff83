package cdc_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestCDCReadsABacklogInBulk: transactions the server sends well after
// they committed are a backlog, which the stream reads in bulk (the socket
// wakes it for 64 KiB, or after a few milliseconds) and hands on several
// transactions to a batch, whose Done confirms them all; a live
// transaction switches that off again, and goes on alone at its commit. A
// backlog smaller than the bulk still arrives whole, and every event in
// order.
func TestCDCReadsABacklogInBulk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	exec(ctx, t, admin,
		createOutbox,
		`CREATE PUBLICATION bulk_pub FOR TABLE outbox WITH (publish = 'insert')`)
	write := func(n int, from int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			insertEvent(ctx, t, admin, strconv.Itoa(i))
		}
	}
	var logs syncBuffer
	src, err := cdc.New(cdc.Config{URL: url, Slot: "bulk_slot", Publication: "bulk_pub"},
		cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	// receive runs the source until it has handed on the events with
	// aggregate ids from..to-1, and checks they come in order. sizes gets
	// the number of new events in each batch that has any.
	var sizes []int
	receive := func(from, to int, whileRunning func()) {
		t.Helper()
		runCtx, stop := context.WithCancel(ctx)
		out := make(chan connector.Batch)
		done := make(chan error, 1)
		go func() { done <- src.Run(runCtx, out) }()
		defer func() {
			stop()
			if err := <-done; err != nil && runCtx.Err() == nil {
				t.Errorf("source: %v", err)
			}
		}()
		whileRunning()
		next := from
		for next < to {
			select {
			case b := <-out:
				had := next
				for _, e := range b.Events {
					n, err := strconv.Atoi(e.AggregateID)
					switch {
					case err != nil:
						t.Fatalf("aggregate id %q: %v", e.AggregateID, err)
					case n < from:
						// relayed before, not yet confirmed
					case n != next:
						t.Fatalf("event of aggregate %d, want %d next", n, next)
					default:
						next++
					}
				}
				if next > had {
					sizes = append(sizes, next-had)
				}
				if b.Done == nil {
					// Each of these transactions is one event: a batch
					// holds whole ones.
					t.Fatalf("a batch of %d events without a Done", len(b.Events))
				}
				b.Done(nil)
			case err := <-done:
				t.Fatalf("source ended: %v", err)
			case <-ctx.Done():
				t.Fatalf("%d of events %d..%d arrived; log:\n%s", next-from, from, to-1, logs.String())
			}
		}
	}
	// The first run makes the slot, then takes one live event.
	receive(0, 1, func() {
		waitForSlot(ctx, t, admin, "bulk_slot")
		write(1, 0)
	})
	// Fifty events, a few KiB, committed while no relay runs: a backlog
	// by the time the next run starts.
	write(50, 1)
	backlogEnd := currentLSN(ctx, t, admin)
	time.Sleep(backlogAge)
	sizes = nil
	// The live event's insert shares admin: the test uses admin again
	// only once the insert has returned.
	wrote := make(chan struct{})
	receive(1, 52, func() {
		// 50 from the backlog, then one live once they are in.
		for !strings.Contains(logs.String(), "reading a backlog in bulk") {
			select {
			case <-ctx.Done():
				t.Fatalf("the backlog was not read in bulk; log:\n%s", logs.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
		go func() {
			defer close(wrote)
			time.Sleep(500 * time.Millisecond)
			if _, err := admin.Exec(ctx, `INSERT INTO outbox VALUES (gen_random_uuid(), 'order', '51', 'created', '{}')`); err != nil {
				t.Errorf("write the live event: %v", err)
			}
		}()
	})
	<-wrote
	if !strings.Contains(logs.String(), "caught up with the server: reading message by message") {
		t.Errorf("a live event did not switch bulk reading off; log:\n%s", logs.String())
	}
	// 50 transactions of the backlog, then the live one.
	if len(sizes) < 2 || slices.Max(sizes[:len(sizes)-1]) < 2 || sizes[len(sizes)-1] != 1 {
		t.Errorf("events per batch %v: want the backlog's transactions handed on several to a batch, and the live one alone", sizes)
	}
	// Done of the batches confirmed the backlog's transactions.
	var at string
	if err := admin.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'bulk_slot'`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	if lsn, err := pglogrepl.ParseLSN(at); err != nil || lsn < backlogEnd {
		t.Errorf("the slot confirmed %s (%v), want at least %s, the backlog's end", at, err, backlogEnd)
	}
}

// waitForSlot waits until a walsender streams from the slot.
func waitForSlot(ctx context.Context, t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	for {
		var active bool
		err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		if err == nil && active {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("slot %s never became active: %v", slot, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
