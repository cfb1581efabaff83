package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestLostSlotCheckpointHoldsLateAcks: a session that ends on a lost
// connection saves its checkpoint at once, before the runner hears of the
// end; what it had on its way to Kafka is acknowledged after that. When
// the next session finds the slot dropped, the checkpoint it reports, and
// a backfill would start after, holds those acknowledgements too, so the
// backfill does not publish them again uncounted.
func TestLostSlotCheckpointHoldsLateAcks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	exec(ctx, t, admin,
		createOutbox,
		`CREATE PUBLICATION late_pub FOR TABLE outbox WITH (publish = 'insert')`)
	src, err := cdc.New(cdc.Config{URL: url, Slot: "late_slot", Publication: "late_pub", CheckpointInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	receive := func(out <-chan connector.Batch, id string) connector.Batch {
		t.Helper()
		for {
			select {
			case b := <-out:
				if len(b.Events) == 1 && b.Events[0].AggregateID == id && b.Done != nil {
					return b
				}
				if b.Done != nil {
					b.Done(nil) // a checkpoint-only batch
				}
			case <-ctx.Done():
				t.Fatalf("no batch with the event of aggregate %s", id)
			}
		}
	}

	out := make(chan connector.Batch)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	waitForSlot(ctx, t, admin, "late_slot")
	insertEvent(ctx, t, admin, "a")
	receive(out, "a").Done(nil)
	waitFor(ctx, t, "the checkpoint of the first event", func() bool {
		cp, ok := src.Checkpoint()
		return ok && cp.EndLSN != 0 && src.ConfirmedLSN() == src.AcknowledgedLSN()
	})
	first, _ := src.Checkpoint()
	insertEvent(ctx, t, admin, "b")
	late := receive(out, "b")
	// The connection ends while b is on its way to Kafka.
	exec(ctx, t, admin, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'late_slot'`)
	if err := <-done; err == nil {
		t.Fatal("the source returned nil when its connection was terminated")
	}
	if cp, _ := src.Checkpoint(); cp.EndLSN != first.EndLSN {
		t.Fatalf("checkpoint at %d after the lost connection, want the first event's %d", cp.EndLSN, first.EndLSN)
	}
	late.Done(nil) // Kafka acknowledged b after the session saved
	// The walsender sends its FATAL before it exits, and lets go of the
	// slot only as it does.
	waitFor(ctx, t, "the terminated walsender to let go of the slot", func() bool {
		var active bool
		err := admin.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = 'late_slot'`).Scan(&active)
		return err == nil && !active
	})
	exec(ctx, t, admin, `SELECT pg_drop_replication_slot('late_slot')`)

	err = src.Run(ctx, make(chan connector.Batch))
	var lost *cdc.SlotLostError
	if !errors.As(err, &lost) {
		t.Fatalf("second session: %v, want a lost slot", err)
	}
	cp, _ := src.Checkpoint()
	if cp.EndLSN <= first.EndLSN || cp.EndLSN != uint64(src.AcknowledgedLSN()) {
		t.Errorf("the lost slot was reported with the checkpoint at %d (acknowledged %d, the first event's %d): the late acknowledgement of b is not in it",
			cp.EndLSN, src.AcknowledgedLSN(), first.EndLSN)
	}
	if want := fmt.Sprint(src.AcknowledgedLSN()); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not name the checkpoint %s it was judged by: %v", want, err)
	}
}
