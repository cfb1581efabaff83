package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The suite's process and connection faults: the relay runs whole, as the
// binary or as app.Run, and each behaviour says what a user would see.

// killFiveTimes runs the source's relay binary (two instances where the
// source shares a table, killed in turn) and kills it with SIGKILL five
// times, 3s apart, as a crash-looping pod would, while 4 concurrent writers
// commit 30,000 events at 2,000 a second over 100 aggregates. It checks
// every record as a read_committed consumer: nothing lost, each aggregate
// in commit order, routed as Debezium would; then SIGTERM stops every
// instance with exit 0. It returns what the check found; the events
// repeated are logged.
func killFiveTimes(t *testing.T, kind sourceKind, env ...string) report {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	b := testenv.KafkaBroker(t)
	topics := ownTopics(t, b, 0)
	name := uniqueName(t)
	ctx := context.Background()
	kind.prepare(t, url)
	cfg := kind.binaryConfig(url, b.Addrs, name)
	env = append(relayEnv(b, topics), env...)
	procs := make([]*proc, kind.instances())
	for i := range procs {
		procs[i] = runBinary(t, cfg, env...)
	}
	kind.ready(ctx, t, pool, name)

	// Each writer owns 25 aggregates and commits 5 events every 10ms,
	// numbered per aggregate in commit order.
	const writers = 4
	written := make(chan error, writers)
	for wr := range writers {
		go func() {
			written <- func() error {
				seq := map[int]int{}
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for i := range 1500 {
					<-tick.C
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					for j := range 5 {
						a := wr + writers*((i*5+j)%25)
						seq[a]++
						if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'T', $2)`,
							aggID(a), fmt.Sprintf(`{"seq": %d}`, seq[a])); err != nil {
							_ = tx.Rollback(ctx)
							return err
						}
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	c := topics.collect(t, b.Addrs)
	for i := range 5 {
		time.Sleep(3 * time.Second)
		k := i % len(procs)
		procs[k].signal(t, syscall.SIGKILL, 10*time.Second)
		procs[k] = runBinary(t, cfg, env...)
	}
	for range writers {
		if err := <-written; err != nil {
			t.Fatalf("write the events: %v", err)
		}
	}
	rows := readRows(ctx, t, pool, "outbox")
	if len(rows) != 30000 {
		t.Fatalf("%d rows committed, want 30000", len(rows))
	}
	c.waitFor(t, rows, 3*time.Minute)
	for i, p := range procs {
		if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
			t.Errorf("instance %d: exit code %d after SIGTERM, want 0", i+1, code)
		}
		if !strings.Contains(p.out.String(), kind.started) {
			t.Errorf("instance %d never logged %q:\n%s", i+1, kind.started, lastLines(p.out.String(), 20))
		}
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if kind.unpublished != nil {
		if left := kind.unpublished(t, pool); left != 0 {
			t.Errorf("%d rows left unpublished", left)
		}
	}
	t.Logf("%d records for %d events after five SIGKILLs: %d repeated (%.1f%%)",
		rep.records, len(rows), rep.duplicates, 100*float64(rep.duplicates)/float64(len(rows)))
	return rep
}

// testKilledMidStream: the relay killed mid-stream, five times, at least
// once. Nothing may be lost and every aggregate stays in commit order. The
// events repeated are logged, not asserted (they depend on timing): for
// CDC they are bounded by what Kafka had acknowledged but no checkpoint
// held yet, which cdc.checkpoint_interval keeps to a fraction of a second;
// with only the 10s status interval, this run repeated about three times
// the events (88,580), with a 200ms interval 1,260-1,660 (4-6%). For the
// poller, by the claims in flight.
func testKilledMidStream(t *testing.T, kind sourceKind) {
	killFiveTimes(t, kind)
}

// testPostgresConnectionsDrop drops every open connection to PostgreSQL
// silently while 10,000 events stream, as a NAT gateway or firewall that
// forgets them does. The relay notices (the replication stream's silence
// after cdc.receive_timeout; a claim or mark failing after
// postgres.query_timeout), says so at WARN with how long, counts a
// restart and reconnects on its own; a source whose dead sessions hold
// rows ends them on the server from a fresh connection. Every event
// arrives, each aggregate in order, and the relay is up and live again.
// The server here would keep a dead claim's transaction for ten minutes
// (idle_in_transaction_session_timeout set in the URL), so the events
// arriving within seconds shows the relay ended the sessions itself.
func testPostgresConnectionsDrop(t *testing.T, kind sourceKind) {
	e := newDeadConnEnv(t)
	kind.prepare(t, e.url)
	slowServer := map[string]string{"postgres.url": withParam(t, e.viaProxy, "idle_in_transaction_session_timeout", "600000")}
	relays := make([]*appRelay, kind.instances())
	for i := range relays {
		relays[i] = e.start(t, kind.name, slowServer)
	}
	ctx := context.Background()
	c := e.topics.collect(t, e.brokers)
	written := workload{table: "outbox", writers: 4, aggregates: 100, events: 10000, txnSize: 2}.writeInBackground(ctx, t, e.pool)

	c.readAtLeast(ctx, t, 1500, time.Minute)
	dropped := e.proxy.drop()
	droppedAt := time.Now()
	t.Logf("dropped %d open connections with %d records in Kafka", dropped, len(c.recs))
	<-written
	rows := readRows(ctx, t, e.pool, "outbox")
	c.waitFor(t, rows, kind.deadConn.within)
	t.Logf("every event in Kafka %s after the drop", time.Since(droppedAt).Round(100*time.Millisecond))

	warnings, ended := 0, 0
	for i, a := range relays {
		ws := warned(t, a, kind.deadConn.warning)
		if len(ws) > 0 {
			// Every event can be in Kafka, by the other instance or its
			// other claims, before this one's source has given up on its
			// last silent connection and restarted: the restart follows
			// the WARN within a few query timeouts.
			a.waitMetric(t, "outboxrelay_source_restarts_total", 30*time.Second, "at least 1 after the relay warned of the dead connection", func(v float64) bool { return v >= 1 })
		}
		if kind.deadConn.ended != "" {
			ended += len(warned(t, a, kind.deadConn.ended))
		}
		if len(ws) == 0 {
			// Of several instances, one may have had nothing in hand.
			continue
		}
		warnings++
		s, _ := ws[0][kind.deadConn.bound].(string)
		if d, err := time.ParseDuration(s); err != nil || d < 2*time.Second {
			t.Errorf("relay %d: the WARN gives %s %q; want at least the 2s bound: %v", i, kind.deadConn.bound, s, ws[0])
		}
	}
	if warnings == 0 {
		t.Errorf("no relay warned %q", kind.deadConn.warning)
	}
	if kind.deadConn.ended != "" && ended == 0 {
		t.Errorf("no relay said %q", kind.deadConn.ended)
	}
	for _, a := range relays {
		a.waitMetric(t, "outboxrelay_source_up", 30*time.Second, "1 once reading again", func(v float64) bool { return v == 1 })
		a.waitStatus(t, "/healthz", http.StatusOK, 10*time.Second)
		a.stop(t)
		checkLog(t, a.logs.String(), false)
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events (%d repeats, at least once)", rep.records, len(rows), rep.duplicates)
	if kind.unpublished != nil {
		if left := kind.unpublished(t, e.pool); left != 0 {
			t.Errorf("%d rows left unpublished", left)
		}
	}
}

// testPostgresUnreachable makes PostgreSQL unreachable, as seen from the
// relay, for longer than http.live_stall_timeout while events are
// committed: the relay warns of the dead connection, source_up drops to 0,
// /healthz fails saying the source has not been connected, and once
// PostgreSQL is reachable again the relay works, /healthz passes and every
// event arrives in order.
func testPostgresUnreachable(t *testing.T, kind sourceKind) {
	e := newDeadConnEnv(t)
	kind.prepare(t, e.url)
	a := e.start(t, kind.name, nil)
	ctx := context.Background()
	c := e.topics.collect(t, e.brokers)
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 100}
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, "outbox"), time.Minute)

	e.proxy.unreachable()
	// Committed while the relay cannot see the database.
	w2 := w
	w2.seqBase = 100 / 10
	w2.write(ctx, t, e.pool)
	waitWarn(t, a, kind.deadConn.warning, 30*time.Second)
	a.waitMetric(t, "outboxrelay_source_up", 30*time.Second, "0 while the source reconnects", func(v float64) bool { return v == 0 })
	body := a.waitStatus(t, "/healthz", http.StatusServiceUnavailable, 30*time.Second, "connected", "the source has not been connected for")
	t.Logf("/healthz while unreachable: %s", body)
	// The probe reaches the database through the proxy too, so it cannot
	// see the slot stand still here (see TestDeadConnSlotHeldOldestAgeGrows
	// for that).

	e.proxy.restore()
	a.waitStatus(t, "/healthz", http.StatusOK, time.Minute)
	a.waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	a.waitMetric(t, "outboxrelay_source_up", 30*time.Second, "1 once connected again", func(v float64) bool { return v == 1 })
	rows := readRows(ctx, t, e.pool, "outbox")
	c.waitFor(t, rows, time.Minute)
	a.stop(t)
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)
}
