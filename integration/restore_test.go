package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestCDCRestoredFromBackupStops: the database is restored from a file
// copy taken before the relay's last checkpoint. The system identifier is
// the same and the slot is there, behind the checkpoint, as after a crash
// between saving and confirming; but the server's WAL ends before the
// checkpoint, so what commits now takes positions the checkpoint says were
// relayed, and streaming would skip it without a word. The relay stops as
// on any slot loss; with cdc.on_slot_loss recreate it streams from the
// slot, and what commits on the restored server reaches Kafka.
func TestCDCRestoredFromBackupStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	url, err := srv.CreateDatabase(ctx, "restored")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	const slot = "restored_slot"
	open := func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
		return sink.NewCheckpointStore(ctx, sink.Config{Brokers: brokers}, "", key)
	}
	newSrc := func(onLoss cdc.OnSlotLoss) *cdc.Source {
		src, err := cdc.New(cdc.Config{URL: url, Table: "public.outbox", Slot: slot, Publication: slot,
			StatusInterval: 100 * time.Millisecond, OnSlotLoss: onLoss},
			cdc.WithLogger(testLogger(t)), cdc.WithCheckpoints(open, "test"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(src.Close)
		return src
	}
	c := newCollector(t, brokers, "outbox.event.order")
	relayRound := func(w workload) {
		t.Helper()
		r := startRelay(t, newSrc(cdc.SlotLossFail), brokers, connector.RunnerConfig{}, sink.Config{})
		waitSlotActive(ctx, t, pool, slot)
		w.write(ctx, t, pool)
		c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)
		r.stop(t)
		waitSlotReleased(ctx, t, pool, slot)
	}
	data := filepath.Join(srv.Dir(), "data")
	stopped := func(do func()) {
		t.Helper()
		pool.Close()
		if err := srv.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		do()
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		pool = connectPool(t, url)
	}
	cp := func(from, to string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", "rm -rf '"+to+"' && cp -a '"+from+"' '"+to+"'").CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v: %s", from, err, out)
		}
	}

	relayRound(workload{table: "outbox", writers: 1, aggregates: 5, events: 50})
	backup := filepath.Join(t.TempDir(), "backup")
	stopped(func() { cp(data, backup) })
	// Enough WAL that the checkpoint ends well past the backup's.
	relayRound(workload{table: "outbox", writers: 1, aggregates: 5, events: 2000, seqBase: 10})
	stopped(func() { cp(backup, data) })

	r := startRelay(t, newSrc(cdc.SlotLossFail), brokers, connector.RunnerConfig{}, sink.Config{})
	err = r.wait(t, 30*time.Second)
	var lost *cdc.SlotLostError
	if !errors.As(err, &lost) || lost.Cause != cdc.CauseBehind || !strings.Contains(err.Error(), "before the checkpoint") {
		t.Fatalf("on the restored server the relay stopped with %v; want a lost slot, the server behind the checkpoint", err)
	}

	before := readRows(ctx, t, pool, "outbox")
	r = startRelay(t, newSrc(cdc.SlotLossRecreate), brokers, connector.RunnerConfig{}, sink.Config{})
	defer r.stop(t)
	waitSlotActive(ctx, t, pool, slot)
	workload{table: "outbox", writers: 1, aggregates: 5, events: 50, seqBase: 10}.write(ctx, t, pool)
	after := readRows(ctx, t, pool, "outbox")
	for id := range before {
		delete(after, id)
	}
	c.waitFor(t, after, time.Minute)
}

// TestCDCLateRestoreStops: the database is restored from a file copy taken
// while the relay ran and writers wrote, and written to after the restore
// until its WAL has passed the relay's checkpoint, all before the relay
// starts again. Positions alone cannot tell this server from the one the
// relay read (the WAL is not behind the checkpoint, the slot is behind it
// as after a crash), and streaming from the checkpoint would skip what
// committed after the restore point without a word. The checkpoint's last
// transaction is not at its place in this history: the relay stops with
// cause restored (ERROR, /readyz 503, the slot-lost metric with the
// cause). Started as the ERROR says with cdc.on_slot_loss recreate, it
// streams from the slot, which still holds every change since the copy:
// every row of the restored database reaches Kafka.
func TestCDCLateRestoreStops(t *testing.T) {
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	url, err := srv.CreateDatabase(ctx, "laterestore")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	const slot = "late_restore"
	env := map[string]string{
		"postgres.url":        url,
		"outbox.table":        "public.outbox",
		"cdc.slot":            slot,
		"cdc.publication":     slot,
		"cdc.status_interval": "100ms",
		"kafka.brokers":       strings.Join(brokers, ","),
		"http.listen":         "127.0.0.1:0",
	}
	c := newCollector(t, brokers, "outbox.event.order")
	data := filepath.Join(srv.Dir(), "data")
	backup := filepath.Join(t.TempDir(), "backup")
	restart := func(do func()) {
		t.Helper()
		if err := srv.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		do()
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cp := func(from, to string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", "rm -rf '"+to+"' && cp -a '"+from+"' '"+to+"'").CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v: %s", from, err, out)
		}
	}
	walLSN := func() pglogrepl.LSN {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}

	a := startApp(t, env)
	w := startWriters(ctx, pool, 2, 10)
	c.readAtLeast(ctx, t, 300, time.Minute)
	// The copy, taken with the relay and the writers going: both ride
	// out the server's short stop.
	restart(func() { cp(data, backup) })
	var copied int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&copied); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for n := copied; n < copied+2000; {
		if time.Now().After(deadline) {
			t.Fatalf("the writers wrote %d rows after the copy in 2 minutes; want 2000", n-copied)
		}
		time.Sleep(100 * time.Millisecond)
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	w.stop(t)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), 2*time.Minute)
	a.stop(t)
	var confirmed string
	if err := pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	checkpoint, err := pglogrepl.ParseLSN(confirmed)
	if err != nil {
		t.Fatal(err)
	}

	pool.Reset()
	restart(func() { cp(backup, data) })
	if at := walLSN(); at >= checkpoint {
		t.Fatalf("the restored server's WAL is at %s, already past the checkpoint %s: the copy is not from before it", at, checkpoint)
	}
	// Written to after the restore until its WAL passes the checkpoint:
	// CauseBehind no longer applies.
	for seq := 100000; walLSN() < checkpoint+64*1024; seq += 500 {
		workload{table: "outbox", writers: 2, aggregates: 10, events: 500, seqBase: seq}.write(ctx, t, pool)
	}

	a = launchApp(t, env)
	a.waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Minute, "relaying stopped", "never received", "restored from a backup")
	a.waitMetric(t, "outboxrelay_replication_slot_lost", 30*time.Second, "1", func(v float64) bool { return v == 1 })
	if v, ok := value(a.scrape(t), "outboxrelay_replication_slot_lost", "cause", "restored"); !ok || v != 1 {
		t.Errorf("outboxrelay_replication_slot_lost{cause=\"restored\"} = %v (present: %v), want 1", v, ok)
	}
	if v, ok := value(a.scrape(t), "outboxrelay_replication_slot_losses_total", "cause", "restored"); !ok || v != 1 {
		t.Errorf("outboxrelay_replication_slot_losses_total{cause=\"restored\"} = %v (present: %v), want 1", v, ok)
	}
	logged := false
	for _, l := range logLines(t, a.logs.String()) {
		if l["level"] == "ERROR" && l["cause"] == string(cdc.CauseRestored) {
			logged = true
		}
	}
	if !logged {
		t.Error("no ERROR with cause restored in the log")
	}
	a.cancel()
	err = <-a.done
	a.done = nil
	wantExitSlotLost(t, err, "never received", "restored from a backup", "still holds every change committed here")

	// The recovery the ERROR gives: one start with cdc.on_slot_loss
	// recreate, from the slot as the copy left it.
	env["cdc.on_slot_loss"] = string(cdc.SlotLossRecreate)
	a = startApp(t, env)
	workload{table: "outbox", writers: 2, aggregates: 10, events: 200, seqBase: 900000}.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), 2*time.Minute)
	a.stop(t)
}

// writers insert one-row transactions until stopped, and ride out a
// server that goes away for a while: a failed insert is tried again.
type writers struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startWriters(ctx context.Context, pool *pgxpool.Pool, n, aggregates int) *writers {
	ctx, cancel := context.WithCancel(ctx)
	w := &writers{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for wr := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := map[int]int{}
			for i := 0; ctx.Err() == nil; {
				a := wr + n*(i%(aggregates/n))
				_, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'Happened', $2)`,
					aggID(a), fmt.Sprintf(`{"aggregate": %q, "seq": %d, "pad": "%s"}`, aggID(a), seq[a]+1, pad))
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				seq[a]++
				i++
			}
		}()
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	return w
}

func (w *writers) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatal("the writers did not stop within a minute")
	}
}
