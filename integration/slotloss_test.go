package integration

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// dropSlotUnderRelay does what a DBA does to a slot that pins WAL: ends the
// walsender that streams from it and drops it. The relay reconnects at
// once, so the two are repeated until the drop wins the race.
func dropSlotUnderRelay(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	dropSlot(ctx, t, pool, slot, true)
}

// dropStoppedSlot drops the slot of a relay that was just stopped. Its
// walsender may still be on its way out, holding the slot for a moment:
// the drop is repeated while the server says the slot is in use.
func dropStoppedSlot(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	dropSlot(ctx, t, pool, slot, false)
}

// dropSlot drops the slot, repeating while the server says it is in use,
// and with terminate ending the session that holds it each time first.
func dropSlot(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string, terminate bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if terminate {
			_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		}
		_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		var pe *pgconn.PgError
		if err == nil {
			return
		}
		if !errors.As(err, &pe) || pe.Code != pgerrcode.ObjectInUse || time.Now().After(deadline) {
			t.Fatalf("drop slot %s: %v", slot, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCDCSlotDroppedWhileRunning drops the slot under a running relay and
// commits more events. By default the relay must not carry on from a new
// slot past the gap: it stops with an error that names the slot, says what
// probably happened and what to do. With cdc.on_slot_loss recreate it goes
// on from a new slot, logs the gap at ERROR and counts it.
func TestCDCSlotDroppedWhileRunning(t *testing.T) {
	for _, mode := range []cdc.OnSlotLoss{cdc.SlotLossFail, cdc.SlotLossRecreate} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, cdcKind)
			ctx := context.Background()
			var logs syncBuffer
			src, err := cdc.New(cdc.Config{URL: e.url, Table: "public.outbox", Slot: e.name, Publication: e.name,
				StatusInterval: 100 * time.Millisecond, OnSlotLoss: mode},
				cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
			if err != nil {
				t.Fatal(err)
			}
			r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
			waitSlotActive(ctx, t, e.pool, e.name)
			c := newCollector(t, e.brokers, "outbox.event.order")
			w := workload{table: e.table, writers: 2, aggregates: 10, events: 200}
			w.write(ctx, t, e.pool)
			before := readRows(ctx, t, e.pool, e.table)
			c.waitFor(t, before, time.Minute)

			dropSlotUnderRelay(ctx, t, e.pool, e.name)
			// Committed while no slot exists: no slot can ever send it.
			w.seqBase = 200 / 10
			w.write(ctx, t, e.pool)

			if mode == cdc.SlotLossFail {
				err := r.wait(t, time.Minute)
				if !connector.IsPermanent(err) {
					t.Fatalf("relay stopped with %v; want a permanent error about the lost slot", err)
				}
				for _, want := range []string{`replication slot "` + e.name + `" is gone`, "may never reach Kafka", "dropped", "failover", "cdc.on_slot_loss: recreate", "the last event relayed was committed at"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the error does not say %q:\n%v", want, err)
					}
				}
				var exists bool
				if err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, e.name).Scan(&exists); err != nil {
					t.Fatal(err)
				}
				if exists {
					t.Errorf("the relay created a new slot past the gap; with on_slot_loss fail it must not")
				}
			} else {
				waitSlotActive(ctx, t, e.pool, e.name)
				w.seqBase = 2 * 200 / 10
				w.write(ctx, t, e.pool)
				all := readRows(ctx, t, e.pool, e.table)
				after := map[string]row{}
				for id, rw := range all {
					if payloadSeq(t, rw.payload) > 2*200/10 {
						after[id] = rw
					}
				}
				c.waitFor(t, after, time.Minute)
				r.stop(t)
				if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "is gone") {
					t.Errorf("no ERROR about the lost slot in the log:\n%s", logs.String())
				}
			}
			if n := src.SlotLosses(); n != 1 {
				t.Errorf("SlotLosses = %d, want 1", n)
			}
			// Everything before the drop arrived; nothing foreign did.
			c.settle(300 * time.Millisecond)
			all := readRows(ctx, t, e.pool, e.table)
			for _, rec := range c.recs {
				if _, ok := all[header(rec, "id")]; !ok {
					t.Errorf("record with id %q is no outbox row", header(rec, "id"))
				}
			}
		})
	}
}

// TestCDCSlotInvalidated lets the server invalidate a stopped relay's slot
// through max_slot_wal_keep_size. Starting the relay then stops with an
// error that says the slot was invalidated and why, not that the server is
// not set up for logical replication; with recreate it replaces the slot
// and goes on.
func TestCDCSlotInvalidated(t *testing.T) {
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	url, err := srv.CreateDatabase(ctx, "invalidated")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	const slot = "invalidated_slot"
	cfg := cdc.Config{URL: url, Table: "public.outbox", Slot: slot, Publication: slot, StatusInterval: 100 * time.Millisecond}
	r := startRelay(t, openCDC(t, cfg), brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, pool, slot)
	r.stop(t)

	invalidateSlot(ctx, t, pool, slot)

	r = startRelay(t, openCDC(t, cfg), brokers, connector.RunnerConfig{}, sink.Config{})
	err = r.wait(t, time.Minute)
	if !connector.IsPermanent(err) {
		t.Fatalf("relay stopped with %v; want a permanent error about the invalidated slot", err)
	}
	var lost *cdc.SlotLostError
	if !errors.As(err, &lost) || lost.InvalidationReason != cdc.InvalidationWALRemoved {
		t.Errorf("relay stopped with %#v; want a lost slot whose invalidation reason is wal_removed", err)
	}
	for _, want := range []string{`replication slot "` + slot + `" is invalidated (invalidation_reason wal_removed)`, "max_slot_wal_keep_size", "may never reach Kafka"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "not set up for logical replication") {
		t.Errorf("the error blames the server's setup:\n%v", err)
	}

	// With recreate the relay replaces the slot and relays what commits
	// from then on.
	cfg.OnSlotLoss = cdc.SlotLossRecreate
	src := openCDC(t, cfg)
	r = startRelay(t, src, brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, pool, slot)
	workload{table: "outbox", writers: 1, aggregates: 5, events: 50}.write(ctx, t, pool)
	c := newCollector(t, brokers, "outbox.event.order")
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)
	if n := src.SlotLosses(); n != 1 {
		t.Errorf("SlotLosses = %d, want 1", n)
	}
}

// TestCDCSlotIdleTimeout: PostgreSQL 18 invalidates a slot nobody read for
// idle_replication_slot_timeout, at a checkpoint. The relay, started
// after, stops with an error that names the cause PostgreSQL gives
// (idle_timeout) and the setting, in the error and in the log line.
func TestCDCSlotIdleTimeout(t *testing.T) {
	ctx := context.Background()
	// The shared server says the version: an older one would not start
	// with the setting.
	if major := serverMajor(ctx, t, testenv.Postgres(t)); major < 18 {
		t.Skipf("idle_replication_slot_timeout needs PostgreSQL 18; the servers here are %d (set OUTBOXRELAY_TEST_PG=18)", major)
	}
	// A checkpoint after the timeout invalidates the slot.
	srv := testenv.PostgresServerWith(t, map[string]string{"idle_replication_slot_timeout": "1s"})
	url, err := srv.CreateDatabase(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	const slot = "idle_slot"
	cfg := cdc.Config{URL: url, Table: "public.outbox", Slot: slot, Publication: slot, StatusInterval: 100 * time.Millisecond}
	r := startRelay(t, openCDC(t, cfg), brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, pool, slot)
	r.stop(t)
	waitSlotReleased(ctx, t, pool, slot)

	for deadline := time.Now().Add(time.Minute); ; {
		// The server looks for idle slots at a checkpoint.
		time.Sleep(1500 * time.Millisecond)
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			t.Fatal(err)
		}
		var reason string
		if err := pool.QueryRow(ctx, `SELECT coalesce(invalidation_reason, '') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if reason == cdc.InvalidationIdleTimeout {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot's invalidation_reason is %q a minute after the relay stopped, with idle_replication_slot_timeout 1s", reason)
		}
	}

	var logs syncBuffer
	src, err := cdc.New(cfg, cdc.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	r = startRelay(t, src, brokers, connector.RunnerConfig{}, sink.Config{})
	err = r.wait(t, time.Minute)
	var lost *cdc.SlotLostError
	if !errors.As(err, &lost) || lost.Cause != cdc.CauseInvalidated || lost.InvalidationReason != cdc.InvalidationIdleTimeout {
		t.Fatalf("relay stopped with %v; want a lost slot, invalidated, for idle_timeout", err)
	}
	for _, want := range []string{`replication slot "` + slot + `" is invalidated (invalidation_reason idle_timeout)`, "idle_replication_slot_timeout", "may never reach Kafka"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if !strings.Contains(logs.String(), `"invalidation_reason":"idle_timeout"`) {
		t.Errorf("the log line of the loss has no invalidation_reason idle_timeout:\n%s", logs.String())
	}
}
