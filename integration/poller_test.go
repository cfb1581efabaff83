package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

var pollKind = sourceKind{
	name: "poll",
	open: func(t testing.TB, url, table, _ string) connector.Source {
		return openPoller(t, poller.Config{URL: url, Table: "public." + table})
	},
	// Rows are chosen by state, so whatever commits, before or after the
	// source starts, is claimed: there is nothing to wait for.
	ready: func(context.Context, testing.TB, *pgxpool.Pool, string) {},
	features: Features{
		// A graceful stop lets Kafka acknowledge what is in flight, and
		// the claim commits its mark before the source returns.
		GracefulRestartRepeatsNothing: true,
		ExactlyOnce:                   true,
		// Rows are marked in PostgreSQL just before the Kafka transaction
		// commits: a kill between the two commits repeats one claim.
		ExactlyOnceKillRepeats: binaryPollBatch,
		SeveralInstances:       true,
		// poll.max_attempts, then the dead-letter table.
		Quarantines: true,
	},
	backlog: func(t *testing.T, e *env) connector.Source {
		return openPoller(t, poller.Config{URL: e.url, Table: "public." + e.table})
	},
	prepare: applyBinaryPollDDL,
	binaryConfig: func(url string, brokers []string, _ string) string {
		return yamlConfig(url, brokers, fmt.Sprintf("source: poll\npoll:\n  interval: 100ms\n  batch_size: %d\n", binaryPollBatch))
	},
	started: "polling started",
	deadConn: deadConnSigns{
		warning: "the claiming connection is dead",
		bound:   "query_timeout",
		ended:   "ended the claiming sessions whose connections went silent",
		// postgres.query_timeout (2s) to notice, then seconds to end the
		// sessions and claim again; generous for a loaded machine, and far
		// below the ten minutes the server would keep them.
		within: 45 * time.Second,
	},
	unpublished: func(t testing.TB, pool *pgxpool.Pool) int {
		return countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`)
	},
}

// binaryPollBatch is poll.batch_size in the binary's configuration.
const binaryPollBatch = 500

// openPoller readies the table with the poller's DDL and returns a source
// with test timings.
func openPoller(t testing.TB, cfg poller.Config) *poller.Source {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval, cfg.MaxInterval = 50*time.Millisecond, 500*time.Millisecond
	}
	applyPollDDL(t, cfg)
	src, err := poller.New(cfg, poller.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("poll source: %v", err)
	}
	return src
}

func applyPollDDL(t testing.TB, cfg poller.Config) {
	t.Helper()
	execSQL(t, cfg.URL, poller.DDL(cfg))
}

// applyBinaryPollDDL runs what `outboxrelay poll-ddl` prints for the
// default configuration, as a user readies the table.
func applyBinaryPollDDL(t testing.TB, url string) {
	t.Helper()
	ddl, err := exec.Command(binary(t), "poll-ddl").Output()
	if err != nil {
		t.Fatalf("outboxrelay poll-ddl: %v", err)
	}
	execSQL(t, url, string(ddl))
}

func execSQL(t testing.TB, url, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

// startPollers starts n pollers of e's table, each with its own runner and
// Kafka client, as n processes would be.
func startPollers(t *testing.T, e *env, n int, cfg poller.Config) ([]*poller.Source, []*relay) {
	t.Helper()
	cfg.URL, cfg.Table = e.url, "public."+e.table
	var srcs []*poller.Source
	var relays []*relay
	for range n {
		src := openPoller(t, cfg)
		srcs = append(srcs, src)
		relays = append(relays, startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{}))
	}
	return srcs, relays
}

func countRows(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestPollParallelInstances runs 2 and 4 pollers over one table while 4
// writers commit 20,000 events over 100 aggregates: every event arrives,
// each aggregate in commit order, none twice, and every instance does part
// of the work. Small batches make the instances hand buckets back and forth
// a few hundred times.
func TestPollParallelInstances(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d", n), func(t *testing.T) {
			e := newEnv(t, pollKind)
			srcs, relays := startPollers(t, e, n, poller.Config{BatchSize: 200})
			ctx := context.Background()
			workload{table: e.table, writers: 4, aggregates: 100, events: 20000, txnSize: 2}.write(ctx, t, e.pool)
			rows := readRows(ctx, t, e.pool, e.table)
			c := newCollector(t, e.brokers, "outbox.event.order")
			c.waitFor(t, rows, 2*time.Minute)
			for _, r := range relays {
				r.stop(t)
			}
			c.settle(300 * time.Millisecond)
			rep := c.check(t, rows, partitions)
			if rep.duplicates != 0 {
				t.Errorf("%d duplicates without any failure", rep.duplicates)
			}
			var total int64
			for i, s := range srcs {
				if s.Delivered() == 0 {
					t.Errorf("instance %d delivered nothing: the instances did not share the table", i)
				}
				total += s.Delivered()
			}
			if total != int64(len(rows)) {
				t.Errorf("instances marked %d events published, want %d", total, len(rows))
			}
			if left := countRows(t, e.pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); left != 0 {
				t.Errorf("%d rows left unpublished", left)
			}
		})
	}
}

// TestPollClaimKilledMidBatch terminates the backends of open claims (the
// transaction waiting for Kafka), as a SIGKILL of an instance would end
// them, while two pollers relay: the rows go back to the table and are
// published again; nothing is lost and order holds.
func TestPollClaimKilledMidBatch(t *testing.T) {
	e := newEnv(t, pollKind)
	_, relays := startPollers(t, e, 2, poller.Config{BatchSize: 100})
	ctx := context.Background()
	written := make(chan struct{})
	go func() {
		defer close(written)
		workload{table: e.table, writers: 2, aggregates: 40, events: 6000}.write(ctx, t, e.pool)
	}()
	killed := 0
	deadline := time.Now().Add(time.Minute)
	for killed < 3 && time.Now().Before(deadline) {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'outboxrelay poll' AND state = 'idle in transaction'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		killed += n
		time.Sleep(30 * time.Millisecond)
	}
	if killed < 3 {
		t.Fatalf("terminated %d claims within a minute, want 3", killed)
	}
	<-written
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	for _, r := range relays {
		r.stop(t)
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("terminated %d claims; %d records for %d events", killed, rep.records, len(rows))
}

// TestPollLateCommitDelivered holds a transaction with an outbox row open
// while later rows commit and are published, then commits it: the row is
// still published. A reader by position would have moved past it.
func TestPollLateCommitDelivered(t *testing.T) {
	e := newEnv(t, pollKind)
	ctx := context.Background()
	_, relays := startPollers(t, e, 1, poller.Config{})
	late, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)
	var lateID string
	if err := late.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'late', 'T', '{"seq": 1}') RETURNING id::text`).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	workload{table: e.table, writers: 2, aggregates: 10, events: 500}.write(ctx, t, e.pool)
	early := readRows(ctx, t, e.pool, e.table) // the late row is not visible yet
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, early, time.Minute)
	if c.ids[lateID] != 0 {
		t.Fatal("the uncommitted row was published")
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	all := readRows(ctx, t, e.pool, e.table)
	if _, ok := all[lateID]; !ok || len(all) != len(early)+1 {
		t.Fatalf("after the commit the table has %d rows, want %d with %s", len(all), len(early)+1, lateID)
	}
	c.waitFor(t, all, time.Minute)
	relays[0].stop(t)
	c.settle(300 * time.Millisecond)
	c.check(t, all, partitions)
}

// TestPollBrokerOutage fails every produce request for a while: claims roll
// back and are retried with backoff, the rows stay unpublished in the
// table, and once the broker answers again everything arrives in order.
func TestPollBrokerOutage(t *testing.T) {
	e := newEnv(t, pollKind)
	ctx := context.Background()
	_, relays := startPollers(t, e, 1, poller.Config{})
	workload{table: e.table, writers: 2, aggregates: 20, events: 500}.write(ctx, t, e.pool)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)

	// An outage as acks=all producers see it when brokers go down: every
	// produce refused with NOT_ENOUGH_REPLICAS, which they retry. (A
	// non-retriable refusal of part of the traffic is the known gap in
	// order that testBrokerErrors covers.)
	outage := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	workload{table: e.table, writers: 2, aggregates: 20, events: 1000, seqBase: 25}.write(ctx, t, e.pool)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := outage.Wait(waitCtx, 5); err != nil {
		t.Fatalf("the relay did not retry during the outage: %d produce requests failed (%v)", outage.Hits(), err)
	}
	if left := countRows(t, e.pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); left != 1000 {
		t.Errorf("during the outage %d rows are unpublished, want all 1000 written since it began", left)
	}
	outage.Remove()
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, time.Minute)
	relays[0].stop(t)
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)
	t.Logf("%d produce requests failed during the outage", outage.Hits())
}

// TestPollPoisonRowsDeadLettered commits two rows Kafka can never take
// among ordinary ones, without a dead letter topic: one whose aggregate
// type is no legal topic name, one larger than the broker accepts. Each is
// tried poll.max_attempts times, then moved to the dead-letter table with
// the reason, and everything else, including later events of the same
// aggregate, flows.
func TestPollPoisonRowsDeadLettered(t *testing.T) {
	e := newEnv(t, pollKind, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	ctx := context.Background()
	src := openPoller(t, poller.Config{URL: e.url, Table: "public.outbox", MaxAttempts: 2})
	insert := func(aggType, agg, payload string) string {
		t.Helper()
		var id string
		if err := e.pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'T', $3) RETURNING id::text`,
			aggType, agg, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	insert("order", "a", `{"seq": 1}`)
	badTopic := insert("bad type!", "a", `{"poison": 1}`)
	insert("order", "a", `{"seq": 2}`)
	tooBig := insert("order", "b", `{"blob": "`+strings.Repeat("x", 8000)+`"}`)
	insert("order", "b", `{"seq": 1}`)
	workload{table: e.table, writers: 2, aggregates: 10, events: 200}.write(ctx, t, e.pool)

	// Without a dead letter topic the runner puts such an event into the
	// poller's quarantine (Batch.Quarantine) and goes on; it stops only on
	// what no restart can fix.
	// MaxRecordBytes also caps kgo's batches at the broker's limit, which
	// the limit read from the broker alone does not.
	snk, err := sink.New(sink.Config{Brokers: e.brokers, MaxRecordBytes: 4096}, sink.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	r, err := connector.NewRunner(src, snk, connector.RunnerConfig{RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond},
		connector.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	rows := readRows(ctx, t, e.pool, e.table)
	delete(rows, badTopic)
	delete(rows, tooBig)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, time.Minute)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("relay stopped with %v", err)
	}
	c.settle(300 * time.Millisecond)
	c.check(t, rows, partitions)

	dead, err := e.pool.Query(ctx, `SELECT event_id, aggregateid, reason, attempts, outbox_row->>'aggregatetype' FROM outbox_dead_letter ORDER BY dead_at`)
	if err != nil {
		t.Fatal(err)
	}
	type deadRow struct {
		id, agg, reason string
		attempts        int
		aggType         string
	}
	got, err := pgx.CollectRows(dead, func(r pgx.CollectableRow) (deadRow, error) {
		var d deadRow
		return d, r.Scan(&d.id, &d.agg, &d.reason, &d.attempts, &d.aggType)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{badTopic: "topic name", tooBig: "message.max.bytes"}
	if len(got) != len(want) {
		t.Fatalf("dead-letter table has %d rows (%v), want %d", len(got), got, len(want))
	}
	for _, d := range got {
		why, ok := want[d.id]
		if !ok || !strings.Contains(d.reason, why) || d.attempts != 2 {
			t.Errorf("dead letter %+v: want one of %v with a reason saying %q after 2 attempts", d, want, why)
		}
	}
	if n := countRows(t, e.pool, `SELECT count(*) FROM outbox WHERE id::text = ANY($1)`, []string{badTopic, tooBig}); n != 0 {
		t.Errorf("%d dead-lettered rows are still in the outbox", n)
	}
	if src.DeadLettered() != 2 {
		t.Errorf("DeadLettered() = %d, want 2", src.DeadLettered())
	}
	for _, rec := range c.recs {
		if id := header(rec, "id"); id == badTopic || id == tooBig {
			t.Errorf("dead-lettered event %s reached Kafka", id)
		}
	}
}

// TestPollRetentionAndDeleteMode: in mark mode the retention job deletes
// published rows once they are older than poll.retention; in delete mode
// publishing deletes them.
func TestPollRetentionAndDeleteMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  poller.Config
	}{
		{"MarkWithRetention", poller.Config{Retention: time.Second}},
		{"Delete", poller.Config{Mode: poller.ModeDelete}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, pollKind)
			ctx := context.Background()
			// Written before the relay starts: once relayed, the rows go.
			// (After the DDL: an identity column added to a table numbers
			// its rows in their physical order, not their insert order.)
			applyPollDDL(t, poller.Config{URL: e.url, Mode: tc.cfg.Mode})
			workload{table: e.table, writers: 2, aggregates: 10, events: 300}.write(ctx, t, e.pool)
			rows := readRows(ctx, t, e.pool, e.table)
			_, relays := startPollers(t, e, 1, tc.cfg)
			c := newCollector(t, e.brokers, "outbox.event.order")
			c.waitFor(t, rows, time.Minute)
			deadline := time.Now().Add(20 * time.Second)
			for countRows(t, e.pool, `SELECT count(*) FROM outbox`) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d rows are still in the outbox", countRows(t, e.pool, `SELECT count(*) FROM outbox`))
				}
				time.Sleep(100 * time.Millisecond)
			}
			relays[0].stop(t)
			c.settle(200 * time.Millisecond)
			c.check(t, rows, partitions)
		})
	}
}

// TestPollRefusesMismatchedBuckets: an instance with another poll.buckets
// than one already running would hash aggregates differently, so it
// refuses to start, saying why.
func TestPollRefusesMismatchedBuckets(t *testing.T) {
	e := newEnv(t, pollKind)
	startPollers(t, e, 1, poller.Config{Buckets: 64})
	ctx := context.Background()
	// Of two instances that start together, the later to take its member
	// lock is the one that refuses; wait for the first instance's lock, not
	// just its connections (waiting for those let this test's instance lock
	// first, run on, and hang the suite).
	deadline := time.Now().Add(30 * time.Second)
	for countRows(t, e.pool, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND objid = 64 AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first poller did not take its member lock (poll.buckets 64)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	src := openPoller(t, poller.Config{URL: e.url, Table: "public.outbox", Buckets: 32})
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := src.Run(runCtx, make(chan connector.Batch))
	if !connector.IsPermanent(err) || !strings.Contains(err.Error(), "poll.buckets 64") {
		t.Fatalf("Run = %v; want a permanent error naming the other instance's poll.buckets", err)
	}
}

// TestPollSetupErrorsAreClear: a table without the poller's columns, or
// without its dead-letter table, stops the source with a permanent error
// that names what is missing and how to add it; the DDL can be applied
// twice.
func TestPollSetupErrorsAreClear(t *testing.T) {
	e := newEnv(t, pollKind)
	ctx := context.Background()
	cfg := poller.Config{URL: e.url, Table: "public.outbox"}
	run := func() error {
		src, err := poller.New(cfg, poller.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return src.Run(runCtx, make(chan connector.Batch))
	}
	err := run()
	for _, want := range []string{`"seq"`, `"publish_attempts"`, `"published_at"`, "outboxrelay poll-ddl"} {
		if !connector.IsPermanent(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("without the DDL: Run = %v; want a permanent error naming %s", err, want)
		}
	}
	applyPollDDL(t, cfg)
	applyPollDDL(t, cfg)
	execSQL(t, e.url, `DROP TABLE outbox_dead_letter`)
	if err := run(); !connector.IsPermanent(err) || !strings.Contains(err.Error(), `"public"."outbox_dead_letter" does not exist`) {
		t.Errorf("without the dead-letter table: Run = %v", err)
	}
}

// TestPollBacklog: the poller reports the rows still to publish, which
// outboxrelay_unpublished_events exports, and the age of the oldest when
// the ordering column is a timestamp.
func TestPollBacklog(t *testing.T) {
	e := newEnv(t, pollKind)
	ctx := context.Background()
	src := pollKind.open(t, e.url, e.table, e.name).(*poller.Source)
	workload{table: e.table, writers: 1, aggregates: 5, events: 40, txnSize: 4}.write(ctx, t, e.pool)
	n, oldest, err := src.Backlog(ctx)
	if err != nil || n != 40 || !oldest.IsZero() {
		t.Fatalf("Backlog = %d, %v, %v; want 40 waiting and no age for an identity ordering column", n, oldest, err)
	}

	tsTable := "outbox_ts"
	createOutbox(t, e.pool, tsTable)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE outbox_ts ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()`); err != nil {
		t.Fatal(err)
	}
	tsSrc := openPoller(t, poller.Config{URL: e.url, Table: "public." + tsTable, OrderColumn: "created_at"})
	before := time.Now()
	workload{table: tsTable, writers: 1, aggregates: 2, events: 3}.write(ctx, t, e.pool)
	n, oldest, err = tsSrc.Backlog(ctx)
	if err != nil || n != 3 || oldest.Before(before.Add(-time.Second)) || oldest.After(time.Now()) {
		t.Fatalf("Backlog = %d, %v, %v; want 3 waiting, the oldest written after %v", n, oldest, err, before)
	}
	// Several tables (outbox.tables): a backlog each, by name, for the
	// metric's table label.
	bs, err := poller.Sources{src, tsSrc}.Backlogs(ctx)
	if err != nil || len(bs) != 2 || bs[0].Table != "public.outbox" || bs[0].Events != 40 || bs[1].Table != "public.outbox_ts" || bs[1].Events != 3 {
		t.Fatalf("Backlogs = %+v, %v; want public.outbox with 40 and public.outbox_ts with 3", bs, err)
	}

	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	deadline := time.Now().Add(30 * time.Second)
	for n > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if n, _, err = src.Backlog(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r.stop(t)
	if n != 0 {
		t.Fatalf("%d rows still waiting after the relay ran", n)
	}
}
