package integration

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// After a restart of the server on the same timeline, the checkpoint's
// transaction snapshot proves nothing on its own: a server restored from a
// copy also starts anew on its timeline and hands out the transaction ids
// after the copy's again, so rows written after the restore could carry
// ids below the snapshot's xmin. Without a time that says which rows came
// before the snapshot, the backfill refuses as it did before snapshots,
// naming what to give it; with the insert-time column it chooses by the
// snapshot, taking a row as in Kafka only when the column also says it
// was inserted before the snapshot was taken. Every event arrives.
func TestBackfillRefusesWithoutProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	url, err := srv.CreateDatabase(ctx, "restarted")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createTimestampedOutbox(t, pool)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, cdcYAML(name)))
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 400, txnSize: 2}

	p := startBinary(t, []string{"run", "--config", cfg})
	waitSlotActive(ctx, t, pool, name)
	w.write(ctx, t, pool)
	before := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, before, time.Minute)
	// A checkpoint carries a transaction snapshot once one is taken and
	// a later checkpoint passes its position: the backfill below relies
	// on one being there.
	waitCheckpointSnapshot(ctx, t, brokers, name)
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	dropStoppedSlot(ctx, t, pool, name)
	w.seqBase = w.events / w.aggregates
	w.write(ctx, t, pool)
	pool.Close()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	pool = connectPool(t, url)
	rows := readRows(ctx, t, pool, "outbox")

	backfill := func(args ...string) (string, error) {
		out, err := exec.Command(binary(t), append([]string{"backfill", "--config", cfg, "--after-checkpoint"}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := backfill()
	if code := exitCode(err); code != 1 {
		t.Fatalf("backfill without a time after a restart: exit code %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"transaction snapshot does not serve here", "--timestamp-column", "--all", "track_commit_timestamp"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if slotExists(ctx, t, pool, name) {
		t.Fatal("a refused backfill created the slot")
	}

	out, err = backfill("--timestamp-column", "created_at")
	if err != nil {
		t.Fatalf("backfill --timestamp-column created_at: %v\n%s", err, out)
	}
	report := lastLines(out, 1)
	if !strings.Contains(report, "transaction snapshot") || !strings.Contains(report, "created_at is at or after it") {
		t.Errorf("the backfill did not choose by the snapshot, guarded by the column:\n%s", report)
	}
	c.waitFor(t, rows, time.Minute)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	published, repeated := backfillCounts(t, report)
	gap := len(rows) - len(before)
	t.Logf("%s\n%d records for %d events, %d of them in the gap: %d repeated", report, rep.records, len(rows), gap, rep.duplicates)
	if published < gap || rep.duplicates > repeated {
		t.Errorf("the backfill published %d rows for a gap of %d, %d repeated where it reported %d", published, gap, rep.duplicates, repeated)
	}
}
