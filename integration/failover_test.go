package integration

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// failoverSlotRelay starts a primary and a standby that syncs slots, the
// relay (the binary) on the two servers' failover URL, and waits until the
// relay streams from its slot on the primary and the standby holds a
// synced copy of it. It returns the pair, the brokers, the config file
// and the relay.
func failoverSlotRelay(t *testing.T, syncStandby bool) (*replicaPair, []string, string, *proc) {
	t.Helper()
	ctx := context.Background()
	pair := startReplicaPair(t, 17, "a failover slot", func(ctx context.Context, pool *pgxpool.Pool) {
		createOutbox(t, pool, "outbox")
	})
	if syncStandby {
		// The primary sends a logical walsender's client nothing the
		// standby has not flushed: a promoted standby has all the relay
		// was sent.
		execOn(ctx, t, pair.primary.URL("postgres"),
			`ALTER SYSTEM SET synchronized_standby_slots = '`+standbySlot+`'`, `SELECT pg_reload_conf()`)
	}
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(pair.failoverURL(), brokers,
		"cdc:\n  slot: relay\n  publication: relay\n  status_interval: 100ms\n"))
	p := startBinary(t, []string{"run", "--config", cfg})
	waitSlotActive(ctx, t, connectPool(t, pair.primary.URL(replicaDB)), "relay")
	waitSynced(ctx, t, connectPool(t, pair.standby.URL(replicaDB)), "relay")
	return pair, brokers, cfg, p
}

// waitSynced waits until the standby holds a synced copy of slot, one a
// promotion keeps (not temporary: the slot sync worker persists a slot
// only once the standby has the WAL and catalog rows it needs).
func waitSynced(ctx context.Context, t *testing.T, standby *pgxpool.Pool, slot string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var ready bool
		err := standby.QueryRow(ctx, `SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&ready)
		if err == nil && ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby has no synced copy of slot %s after 2 minutes (ready %v, %v)", slot, ready, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFailoverSlotCarriesOn fails the primary over to a standby that syncs
// the relay's failover slot, with writers going on, and moves the relay's
// address (a URL listing both servers, target_session_attrs=read-write).
// The relay carries on from the synced slot: every event the promoted
// server holds reaches Kafka in each aggregate's order, nothing reaches
// Kafka that the promoted server does not hold (synchronized_standby_slots
// kept the relay from getting what the standby had not), no slot is
// created on the new primary, no loss is counted, and no more is repeated
// than a restart repeats. `check` says the slot is a failover slot that a
// standby syncs.
func TestFailoverSlotCarriesOn(t *testing.T) {
	ctx := context.Background()
	pair, brokers, cfg, p := failoverSlotRelay(t, true)

	out, _ := exec.Command(binary(t), "check", "--config", cfg).CombinedOutput()
	for _, want := range []string{"a failover slot", "slot sync worker is connected", `synchronized_standby_slots is "` + standbySlot + `"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check does not say %q:\n%s", want, out)
		}
	}

	c := newCollector(t, brokers, "outbox.event.order")
	writers := connectPool(t, pair.failoverURL())
	stop := make(chan struct{})
	written, failed := failoverWriters(ctx, writers, 3, 15*time.Millisecond, stop)
	time.Sleep(5 * time.Second)
	pair.failover(ctx, t)
	newPrimary := connectPool(t, pair.standby.URL(replicaDB))
	var atPromotion int
	if err := newPrimary.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&atPromotion); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	close(stop)
	<-written
	rows := readRows(ctx, t, newPrimary, "outbox")
	if len(rows) <= atPromotion {
		t.Fatalf("no event was written after the promotion (%d rows then, %d now; %d writes failed)", atPromotion, len(rows), failed.Load())
	}
	c.waitFor(t, rows, 2*time.Minute)

	ep := binaryEndpoint(t, p)
	mfs := ep.scrape(t)
	for _, cause := range []string{"dropped", "invalidated", "ahead", "another cluster", "server behind", "restored"} {
		if v, _ := value(mfs, "outboxrelay_replication_slot_losses_total", "cause", cause); v != 0 {
			t.Errorf("outboxrelay_replication_slot_losses_total{cause=%q} = %v after the failover, want 0", cause, v)
		}
	}
	ep.waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	var synced bool
	if err := newPrimary.QueryRow(ctx, `SELECT synced FROM pg_replication_slots WHERE slot_name = 'relay'`).Scan(&synced); err != nil {
		t.Fatalf("the relay's slot on the promoted server: %v", err)
	}
	if !synced {
		t.Errorf("the relay's slot on the promoted server is not the synced copy")
	}
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	logs := p.out.String()
	if n := strings.Count(logs, "created replication slot"); n != 1 {
		t.Errorf("the relay created a replication slot %d times; once, on the old primary, is right", n)
	}
	// "outboxrelay backfill", the command a loss names: a WARN that a
	// transaction snapshot was cut off by the failover may say "backfill".
	for _, bad := range []string{"replication slot lost", "outboxrelay backfill", "publishing the table again"} {
		if strings.Contains(logs, bad) {
			t.Errorf("the relay's log says %q after a failover with the slot synced", bad)
		}
	}
	c.settle(500 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d events on the promoted server (%d at the promotion), %d records in Kafka, %d repeated; %d writes failed during the failover",
		len(rows), atPromotion, rep.records, rep.duplicates, failed.Load())
	// A reconnect repeats what was in flight after the last checkpoint;
	// streaming again from the synced slot's own position, which trails
	// the relay's by up to the sync worker's nap, would repeat much more.
	if rep.duplicates*10 >= len(rows) {
		t.Errorf("%d of %d events arrived twice; a failover should repeat no more than a reconnect does", rep.duplicates, len(rows))
	}
}

// TestFailoverSlotStandbyBehindStopsLoudly promotes a standby that stopped
// receiving WAL while the relay went on reading the primary (no
// synchronized_standby_slots to hold the relay back): its synced slot,
// and its WAL, end before the relay's checkpoint. The relay must not carry
// on from there, which would pass over what commits on the new primary at
// positions the checkpoint says were relayed: it stops with the slot-loss
// error, naming the cause and the command that recovers, /readyz fails,
// the metric says so, and an event committed on the new primary is not
// published.
func TestFailoverSlotStandbyBehindStopsLoudly(t *testing.T) {
	ctx := context.Background()
	pair, brokers, cfg, p := failoverSlotRelay(t, false)
	out, _ := exec.Command(binary(t), "check", "--config", cfg).CombinedOutput()
	for _, want := range []string{"a failover slot", "slot sync worker is connected", "synchronized_standby_slots is empty"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check does not say %q:\n%s", want, out)
		}
	}
	primary := connectPool(t, pair.primary.URL(replicaDB))
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 100}
	w.write(ctx, t, primary)
	c.waitFor(t, readRows(ctx, t, primary, "outbox"), time.Minute)

	// The standby's WAL receiver stops; the relay reads on.
	execOn(ctx, t, pair.standby.URL("postgres"), `ALTER SYSTEM SET primary_conninfo = ''`, `SELECT pg_reload_conf()`)
	pair.waitStandbyStreams(ctx, t, false)
	w.seqBase = 100 / 10
	w.write(ctx, t, primary)
	c.waitFor(t, readRows(ctx, t, primary, "outbox"), time.Minute)
	// Let the relay checkpoint what Kafka acknowledged.
	time.Sleep(2 * time.Second)

	pair.failover(ctx, t)
	newPrimary := connectPool(t, pair.standby.URL(replicaDB))
	waitLog(t, p, "replication slot lost", 2*time.Minute)
	ep := binaryEndpoint(t, p)
	body := ep.waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Minute, "relaying stopped")
	t.Logf("/readyz after the failover to the standby held behind:\n%s", body)
	for _, want := range []string{`replication slot "relay"`, "backfill", "cdc.on_slot_loss"} {
		if !strings.Contains(body, want) && !strings.Contains(p.out.String(), want) {
			t.Errorf("neither /readyz nor the log says %q:\n%s", want, body)
		}
	}
	if !strings.Contains(body, "before the checkpoint") && !strings.Contains(body, "sends what the relay never received") {
		t.Errorf("/readyz does not say the promoted server's WAL ends before the checkpoint, or that its history differs:\n%s", body)
	}
	mfs := ep.scrape(t)
	var lost float64
	for _, cause := range []string{"server behind", "restored"} {
		v, _ := value(mfs, "outboxrelay_replication_slot_lost", "cause", cause)
		lost += v
	}
	if lost != 1 {
		t.Errorf("outboxrelay_replication_slot_lost{cause=\"server behind\" or \"restored\"} = %v, want 1", lost)
	}

	// Committed on the new primary after the loss: the relay stopped, it
	// must not publish it, past the gap.
	if _, err := newPrimary.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'after-failover', 'Happened', '{"seq": 1}')`); err != nil {
		t.Fatal(err)
	}
	c.settle(3 * time.Second)
	for _, r := range c.recs {
		if string(r.Key) == "after-failover" {
			t.Errorf("the relay published an event committed on the promoted server past the gap")
		}
	}
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 1 {
		t.Errorf("exit code %d after SIGTERM of the relay stopped on a lost slot, want 1", code)
	}
}
