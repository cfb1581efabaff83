package integration

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	newSrc := func(onLoss string) *cdc.Source {
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
