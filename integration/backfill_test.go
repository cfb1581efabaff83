package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// The recovery the docs give for a lost slot, run as written, with the
// binary: the relay reports the loss and is stopped; `outboxrelay backfill
// --after-checkpoint` publishes the rows committed since the checkpoint
// again while writers go on, creating the slot when it is gone; the relay,
// started again with its configuration unchanged, carries on from there.
// Every event reaches Kafka, each aggregate in commit order once repeats
// are dropped by id.
func TestBackfillAfterSlotLost(t *testing.T) {
	t.Parallel()
	t.Run("dropped", func(t *testing.T) { testBackfill(t, false) })
	// Dropped and created again by someone else, past the gap.
	t.Run("recreated ahead", func(t *testing.T) { testBackfill(t, true) })
	// The backfill writes in Kafka transactions too, under the relay's
	// transactional id, and the relay fences it when it starts.
	t.Run("dropped exactly_once", func(t *testing.T) { testBackfill(t, false, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once") })
}

func testBackfill(t *testing.T, recreate bool, env ...string) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createTimestampedOutbox(t, pool)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, cdcYAML(name)))
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 4, aggregates: 40, events: 2000, txnSize: 4}

	p := startBinary(t, []string{"run", "--config", cfg}, env...)
	waitSlotActive(ctx, t, pool, name)
	w.write(ctx, t, pool)
	before := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, before, time.Minute)
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	// The slot goes while the relay is stopped; events keep coming.
	dropStoppedSlot(ctx, t, pool, name)
	w.seqBase = 2000 / 40
	w.write(ctx, t, pool)
	gap := map[string]row{}
	for id, r := range readRows(ctx, t, pool, "outbox") {
		if _, ok := before[id]; !ok {
			gap[id] = r
		}
	}
	cause, slotSays := "dropped", "created the slot anew"
	if recreate {
		if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
			t.Fatal(err)
		}
		cause, slotSays = "ahead", "the slot carries on from where it is"
	}
	p = startBinary(t, []string{"run", "--config", cfg}, env...)
	waitLog(t, p, "backfill --after-checkpoint", time.Minute)
	// It stays up until stopped, then exits 1: it did not relay.
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 1 {
		t.Fatalf("exit code %d after SIGTERM of the relay that found the slot lost, want 1", code)
	}

	backfill := func(args ...string) ([]byte, error) {
		cmd := exec.Command(binary(t), append([]string{"backfill", "--config", cfg, "--after-checkpoint"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}

	// Writers go on during the backfill: their rows come in the
	// backfill, the stream after it, or both.
	w.seqBase = 2 * 2000 / 40
	w.events = 8000
	written := w.writeInBackground(ctx, t, pool)
	out, err := backfill("--timestamp-column", "created_at")
	if err != nil {
		t.Fatalf("backfill: %v\n%s", err, out)
	}
	t.Logf("backfill:\n%s", out)
	for _, want := range []string{"published", "(the slot was " + cause + ")", slotSays, "Start the relay"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the backfill's report does not say %q:\n%s", want, out)
		}
	}
	c.waitFor(t, gap, time.Minute)

	p = startBinary(t, []string{"run", "--config", cfg}, env...)
	<-written
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	// A backfill beside a relay that streams from the slot refuses. The
	// backfill may have published every row already, so that Kafka has
	// them all before the relay streams: wait for its stream.
	waitSlotActive(ctx, t, pool, name)
	out, err = backfill("--timestamp-column", "created_at")
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "a backfill needs the slot to itself") {
		t.Errorf("backfill while the relay streams: exit code %d, want 1 and a refusal:\n%s", code, out)
	}
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	// Run again once the relay is stopped: the slot carries on from the
	// checkpoint, and it publishes nothing.
	waitSlotReleased(ctx, t, pool, name)
	out, err = backfill("--timestamp-column", "created_at")
	if err != nil || !strings.Contains(string(out), "no event was missed; nothing published") {
		t.Errorf("backfill after the recovery: %v; want it to find nothing missed:\n%s", err, out)
	}
	if strings.Contains(p.out.String(), "replication slot lost") || strings.Contains(p.out.String(), "created replication slot") {
		t.Errorf("the relay after the backfill did not carry on from the slot and checkpoint it left:\n%s", p.out.String())
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events (%d in the gap): %d repeated", rep.records, len(rows), len(gap), rep.duplicates)
}

// withoutTxnSnapshots opens the env's checkpoint store as a relay before
// checkpoint version 3 saved: without a transaction snapshot.
func (e *env) withoutTxnSnapshots(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
	store, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", key)
	return noTxnSnapshots{store}, err
}

type noTxnSnapshots struct{ connector.CheckpointStore }

func (s noTxnSnapshots) Save(ctx context.Context, cp connector.Checkpoint) error {
	cp.TxnSnapshot = connector.TxnSnapshot{}
	return s.CheckpointStore.Save(ctx, cp)
}

// exitCode is the exit code of a finished command, 0 for a nil error.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// With track_commit_timestamp on, a backfill needs no timestamp column:
// after a checkpoint without a transaction snapshot (one written before
// checkpoint version 3, as here), it chooses rows by the commit times the
// server kept, so it publishes the gap and, of what Kafka already had,
// only what committed in the second up to the checkpoint's last
// transaction, which it reports.
func TestBackfillByCommitTimestamp(t *testing.T) {
	ctx := context.Background()
	srv := testenv.PostgresServerWith(t, map[string]string{"track_commit_timestamp": "on"})
	e := &env{kind: cdcKind, url: srv.URL("postgres"), table: "outbox", name: uniqueName(t)}
	e.pool = connectPool(t, e.url)
	createOutbox(t, e.pool, e.table)
	e.cluster, e.brokers = testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	c := newCollector(t, e.brokers, "outbox.event.order")
	w := workload{table: e.table, writers: 2, aggregates: 20, events: 1000, txnSize: 5}
	old, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name, StatusInterval: 100 * time.Millisecond},
		cdc.WithLogger(testLogger(t)), cdc.WithCheckpoints(e.withoutTxnSnapshots, "test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Close)
	r := startRelay(t, old, e.brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, e.pool, e.name)
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)
	r.stop(t)
	before := readRows(ctx, t, e.pool, e.table)
	dropStoppedSlot(ctx, t, e.pool, e.name)
	w.seqBase = 1000 / 20
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)

	var logs syncBuffer
	done := make(chan cdc.BackfillResult, 1)
	src, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name},
		cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		cdc.WithCheckpoints(func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
			return sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", key)
		}, "test"),
		cdc.WithBackfill(cdc.Backfill{Done: func(r cdc.BackfillResult) { done <- r }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	r = startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	var res cdc.BackfillResult
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the backfill did not finish within a minute:\n%s", logs.String())
	}
	r.stop(t)
	c.waitFor(t, rows, time.Minute)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	gap := len(rows) - len(before)
	t.Logf("backfill: %+v; %d records for %d events, %d in the gap", res, rep.records, len(rows), gap)
	if !strings.Contains(res.Selection, "track_commit_timestamp") || res.Cause != cdc.CauseDropped || !res.CreatedSlot {
		t.Errorf("backfill result %+v; want rows chosen by commit time, the slot dropped and created anew", res)
	}
	// The checkpoint's last transaction has the commit time the rows are
	// chosen from: its rows come again, with those committed in the
	// second before it, and nothing earlier.
	var window int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE pg_xact_commit_timestamp(xmin) BETWEEN $1::timestamptz - interval '1 second' AND $1`, res.Since).Scan(&window); err != nil {
		t.Fatal(err)
	}
	if res.Rows != gap+res.RepeatedRows() || res.RepeatedRows() > window || res.RepeatedRows() < w.txnSize {
		t.Errorf("the backfill published %d rows, %d of them reported as repeats; want the %d of the gap, and as repeats the checkpoint's last transaction (%d) and at most the %d committed in the second up to it",
			res.Rows, res.RepeatedRows(), gap, w.txnSize, window)
	}
	if rep.duplicates > res.RepeatedRows() {
		t.Errorf("%d rows published twice; want at most the %d the backfill reported", rep.duplicates, res.RepeatedRows())
	}
}

// A backfill cut short before Kafka has every row leaves its checkpoint
// pending at the slot it created; run again, it chooses the same rows and
// publishes them, from the table as it is then, before the stream.
func TestBackfillInterrupted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE outbox ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()`); err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, e.brokers, "outbox.event.order")
	w := workload{table: e.table, writers: 2, aggregates: 20, events: 200, txnSize: 5}
	e.relayAndStop(ctx, t, c, w)
	dropStoppedSlot(ctx, t, e.pool, e.name)
	w.seqBase, w.events = 200/20, 6000
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)

	backfill := func(rc connector.RunnerConfig, sc sink.Config) (*relay, chan cdc.BackfillResult) {
		done := make(chan cdc.BackfillResult, 1)
		src, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name, MaxBatchEvents: 10},
			cdc.WithLogger(testLogger(t)),
			cdc.WithCheckpoints(func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
				return sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", key)
			}, "test"),
			cdc.WithBackfill(cdc.Backfill{TimestampColumn: "created_at", Done: func(r cdc.BackfillResult) { done <- r }}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(src.Close)
		return startRelay(t, src, e.brokers, rc, sc), done
	}

	// The broker refuses the event topic after 20 produce requests: the
	// backfill cannot finish.
	refuse := e.refuseProducesAfter(20)
	r, done := backfill(connector.RunnerConfig{ShutdownTimeout: 500 * time.Millisecond}, sink.Config{MaxBufferedRecords: 100})
	stopRefused(ctx, t, r, refuse)
	select {
	case res := <-done:
		t.Fatalf("the backfill finished (%+v) although the broker refused its rows; the test's premise is wrong", res)
	default:
	}
	if !slotExists(ctx, t, e.pool, e.name) {
		t.Fatal("the interrupted backfill left no slot")
	}

	r, done = backfill(connector.RunnerConfig{}, sink.Config{})
	var res cdc.BackfillResult
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the second backfill did not finish within a minute")
	}
	r.stop(t)
	if res.Rows < len(rows)-200 {
		t.Errorf("the second backfill published %d rows; want at least the %d of the gap", res.Rows, len(rows)-200)
	}
	c.waitFor(t, rows, time.Minute)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("second backfill: %+v; %d records for %d events: %d repeated", res, rep.records, len(rows), rep.duplicates)
}

// The early end of issue 25: a backfill whose last rows Kafka acknowledges
// before its replication stream has started stops at once (its work is
// done), and used to return without the checkpoint that says the rows are
// all in Kafka, leaving the one it wrote when it created the slot, with
// the snapshot pending. The relay started next published the whole table
// again. Here a proxy holds the backfill's START_REPLICATION for good, so
// Kafka always acknowledges first; five backfill-then-restart rounds in a
// row, none of them publishes the table again, and nothing is lost.
func TestBackfillHandsOverWhenKafkaAcksFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createTimestampedOutbox(t, pool)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	slotCfg := cdcYAML(name)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, slotCfg))
	hold, holdURL := newStartReplicationHold(t, url)
	held := writeTemp(t, "backfill.yaml", yamlConfig(holdURL, brokers, slotCfg))
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 1, aggregates: 4, events: 20, txnSize: 2}

	p := startBinary(t, []string{"run", "--config", cfg})
	waitSlotActive(ctx, t, pool, name)
	w.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)
	for round := 1; round <= 5; round++ {
		if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
			t.Fatalf("round %d: exit code %d after SIGTERM", round, code)
		}
		dropStoppedSlot(ctx, t, pool, name)
		w.seqBase += w.events / w.aggregates
		w.write(ctx, t, pool)
		rows := readRows(ctx, t, pool, "outbox")

		heldBefore := hold.count()
		out, err := exec.Command(binary(t), "backfill", "--config", held, "--after-checkpoint", "--timestamp-column", "created_at").CombinedOutput()
		if err != nil {
			t.Fatalf("round %d: backfill: %v\n%s", round, err, out)
		}
		if hold.count() == heldBefore || strings.Contains(string(out), "replication started") {
			t.Fatalf("round %d: the backfill's replication started; the test's premise, that Kafka acknowledges first, does not hold:\n%s", round, out)
		}
		if !strings.Contains(string(out), "Start the relay") {
			t.Fatalf("round %d: the backfill's report does not say to start the relay:\n%s", round, out)
		}

		p = startBinary(t, []string{"run", "--config", cfg})
		waitSlotActive(ctx, t, pool, name)
		c.waitFor(t, rows, time.Minute)
		if log := p.out.String(); strings.Contains(log, "publishing the table again") || strings.Contains(log, "replication slot lost") {
			t.Fatalf("round %d: the relay started after the backfill did not carry on from the checkpoint it left:\n%s\nthe backfill said:\n%s", round, log, out)
		}
	}
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	rows := readRows(ctx, t, pool, "outbox")
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d events: %d repeated", rep.records, len(rows), rep.duplicates)
}

// startReplicationHold is a TCP proxy to PostgreSQL that passes everything
// but a START_REPLICATION command, which it holds for good: a replication
// stream through it never starts.
type startReplicationHold struct {
	held atomic.Int64
}

func newStartReplicationHold(t *testing.T, pgURL string) (*startReplicationHold, string) {
	t.Helper()
	u, err := url.Parse(pgURL)
	if err != nil || u.Host == "" {
		t.Fatalf("the proxy needs a postgres:// URL with a host, got %q: %v", pgURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("cannot listen on loopback for the proxy: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	h := &startReplicationHold{}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go h.serve(client, u.Host)
		}
	}()
	via := *u
	via.Host = ln.Addr().String()
	return h, via.String()
}

func (h *startReplicationHold) serve(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(client, server)
		client.Close()
	}()
	buf := make([]byte, 32<<10)
	holding := false
	for {
		n, err := client.Read(buf)
		// A simple query is one write of the client's, so the command is
		// not split across reads.
		if n > 0 && !holding && bytes.Contains(buf[:n], []byte("START_REPLICATION")) {
			holding = true
			h.held.Add(1)
		}
		if n > 0 && !holding {
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (h *startReplicationHold) count() int64 { return h.held.Load() }

// printedBackfill is the backfill command line a slot-loss error prints,
// between backquotes, as arguments for the binary: "outboxrelay" is the
// program, the rest are run as they are.
var printedBackfill = regexp.MustCompile("`outboxrelay (backfill [^`]*)`")

func printedBackfillArgs(t *testing.T, where, text string) []string {
	t.Helper()
	m := printedBackfill.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s names no backfill command between backquotes:\n%s", where, text)
	}
	return strings.Fields(m[1])
}

// Item 3 of issue 25: the ERROR of a lost slot, in the log and in the body
// of /readyz, names the backfill command that works for the table: by its
// insert-time column, by commit times when the server keeps them, or
// every row when it has neither. The test runs the command as printed,
// with the built binary, then starts the relay: the gap arrives, and the
// relay carries on from the slot and checkpoint the backfill left.
func TestBackfillRunsTheCommandTheErrorPrints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		trackCommit bool
		column      string // DDL for an insert-time column; "" for none
		want        []string
		notWant     []string
	}{
		{name: "insert-time column", column: "created_at timestamptz NOT NULL DEFAULT now()",
			want: []string{"--after-checkpoint", "--timestamp-column created_at"}, notWant: []string{"--all"}},
		{name: "bigint insert time", column: "inserted_ms bigint NOT NULL DEFAULT (extract(epoch from clock_timestamp()) * 1000)::bigint",
			want: []string{"--after-checkpoint", "--timestamp-column inserted_ms"}, notWant: []string{"--all"}},
		{name: "commit timestamps", trackCommit: true,
			want: []string{"--after-checkpoint"}, notWant: []string{"--all", "--timestamp-column"}},
		// The checkpoint's transaction snapshot chooses the rows on the
		// server it was taken on; TestBackfillRefusesWithoutProof has a
		// restart, after which it needs a time.
		{name: "neither", want: []string{"--after-checkpoint"}, notWant: []string{"--all", "--timestamp-column"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := testenv.Postgres(t)
			if tc.trackCommit {
				url = testenv.PostgresServerWith(t, map[string]string{"track_commit_timestamp": "on"}).URL("postgres")
			}
			pool := connectPool(t, url)
			createOutbox(t, pool, "outbox")
			if tc.column != "" {
				if _, err := pool.Exec(ctx, `ALTER TABLE outbox ADD COLUMN `+tc.column); err != nil {
					t.Fatal(err)
				}
			}
			_, brokers := testenv.Kafka(t)
			name := uniqueName(t)
			cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, cdcYAML(name)))
			c := newCollector(t, brokers, "outbox.event.order")
			w := workload{table: "outbox", writers: 2, aggregates: 10, events: 200, txnSize: 2}

			p := startBinary(t, []string{"run", "--config", cfg})
			waitSlotActive(ctx, t, pool, name)
			w.write(ctx, t, pool)
			c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)
			// The snapshot a checkpoint carries is taken now and then, and
			// counts once a later checkpoint passes its position: the
			// printed command relies on one being there.
			waitCheckpointSnapshot(ctx, t, brokers, name)
			if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
				t.Fatalf("exit code %d after SIGTERM", code)
			}
			dropStoppedSlot(ctx, t, pool, name)
			w.seqBase = w.events / w.aggregates
			w.write(ctx, t, pool)
			rows := readRows(ctx, t, pool, "outbox")

			p = startBinary(t, []string{"run", "--config", cfg})
			waitLog(t, p, "replication slot lost", time.Minute)
			body := binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Minute, "relaying stopped")
			args := printedBackfillArgs(t, "/readyz", body)
			if logged := printedBackfillArgs(t, "the log", p.out.String()); !slices.Equal(logged, args) {
				t.Errorf("the log names %q, /readyz %q", logged, args)
			}
			cmdLine := strings.Join(args, " ")
			for _, w := range append(tc.want, "--config "+cfg) {
				if !strings.Contains(cmdLine, w) {
					t.Errorf("the printed command %q does not hold %q", cmdLine, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(cmdLine, w) {
					t.Errorf("the printed command %q holds %q", cmdLine, w)
				}
			}
			if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 1 {
				t.Fatalf("exit code %d after SIGTERM of the relay that found the slot lost, want 1", code)
			}

			out, err := exec.Command(binary(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("the printed command %q: %v\n%s", cmdLine, err, out)
			}
			t.Logf("%s:\n%s", cmdLine, lastLines(string(out), 1))
			p = startBinary(t, []string{"run", "--config", cfg})
			c.waitFor(t, rows, time.Minute)
			waitSlotActive(ctx, t, pool, name)
			if log := p.out.String(); strings.Contains(log, "publishing the table again") || strings.Contains(log, "replication slot lost") {
				t.Errorf("the relay started after the backfill did not carry on from the checkpoint it left:\n%s", log)
			}
			if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
				t.Errorf("exit code %d after SIGTERM", code)
			}
			c.settle(300 * time.Millisecond)
			c.check(t, rows, partitions)
		})
	}
}

// A failover through a promotion, with writers going on at a steady rate
// through an address that lists both servers: the primary is stopped
// mid-load (a fast shutdown, which sends its standby all of its WAL
// first) and its physical standby promoted. The promoted server has the
// same rows and transaction ids and not the relay's slot
// (cdc.failover_slot off; before PostgreSQL 17 no slot moves with a
// promotion anyway). The relay, reconnecting to it, stops with the ERROR;
// the command it prints is run while the writers go on; the relay started
// after it carries on. The backfill chooses rows by the transaction
// snapshot the checkpoint carries, on a standby that keeps commit
// timestamps and on one that does not, where the insert time minus a
// five-minute margin published again every event of the last five
// minutes (half of them here): the repeats stay under 10% of the events
// written, and within what the backfill reported.
//
// OUTBOXRELAY_TEST_FAILOVER_LOAD=events/s,seconds (say 2000,15) sets the
// load, for a measurement at a real rate; the default is some 400 a
// second for 16 seconds, which the test machine can afford.
func TestBackfillAfterFailoverRepeatsLittle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		settings map[string]string
	}{
		{"without commit timestamps", nil},
		{"with commit timestamps", map[string]string{"track_commit_timestamp": "on"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testBackfillAfterFailover(t, tc.settings)
		})
	}
}

// failoverLoad is the writers and the time to write for at the rate
// OUTBOXRELAY_TEST_FAILOVER_LOAD asks, or some 400 events a second for 16
// seconds.
func failoverLoad(t *testing.T) (writers int, interval, duration time.Duration) {
	t.Helper()
	v := os.Getenv("OUTBOXRELAY_TEST_FAILOVER_LOAD")
	if v == "" {
		return 4, 10 * time.Millisecond, 16 * time.Second
	}
	rateText, secsText, ok := strings.Cut(v, ",")
	rate, err1 := strconv.Atoi(rateText)
	secs, err2 := strconv.Atoi(secsText)
	if !ok || err1 != nil || err2 != nil || rate <= 0 || secs <= 0 {
		t.Fatalf("OUTBOXRELAY_TEST_FAILOVER_LOAD=%q: want events/s,seconds, say 2000,15", v)
	}
	// Each writer commits one event every 5ms at most.
	writers = max(1, rate/200)
	return writers, time.Duration(writers) * time.Second / time.Duration(rate), time.Duration(secs) * time.Second
}

func testBackfillAfterFailover(t *testing.T, settings map[string]string) {
	ctx := context.Background()
	pair := startReplicaPairWith(t, 10, "a physical standby", settings, func(ctx context.Context, pool *pgxpool.Pool) {
		createTimestampedOutbox(t, pool)
	})
	url := pair.failoverURL()
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n  failover_slot: false\n", name, name)))
	c := newCollector(t, brokers, "outbox.event.order")

	p := startBinary(t, []string{"run", "--config", cfg})
	waitSlotActive(ctx, t, connectPool(t, pair.primary.URL(replicaDB)), name)
	writers, interval, duration := failoverLoad(t)
	stopWriting := make(chan struct{})
	written, failed := failoverWriters(ctx, connectPool(t, url), writers, interval, stopWriting)
	time.Sleep(duration / 2)
	pair.failoverAfterStop(ctx, t)
	waitLog(t, p, "replication slot lost", time.Minute)
	args := printedBackfillArgs(t, "/readyz", binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Minute, "relaying stopped"))
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 1 {
		t.Fatalf("exit code %d after SIGTERM of the relay that found the slot lost, want 1", code)
	}
	// What the lost stream had on its way to Kafka may land there without
	// an acknowledgement the checkpoint holds (a record of a batch after
	// one the runner dropped unsent), so the backfill publishes it again
	// besides the rows its report counts.
	inFlight := 0
	if m := regexp.MustCompile(`dropping the events not yet sent.* in_flight=(\d+)`).FindStringSubmatch(p.out.String()); m != nil {
		inFlight, _ = strconv.Atoi(m[1])
	}
	time.Sleep(duration / 4)
	out, err := exec.Command(binary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("the printed command %q: %v\n%s", strings.Join(args, " "), err, out)
	}
	p = startBinary(t, []string{"run", "--config", cfg})
	time.Sleep(duration / 4)
	close(stopWriting)
	<-written
	promoted := connectPool(t, pair.standby.URL(replicaDB))
	rows := readRows(ctx, t, promoted, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)

	report := lastLines(string(out), 1)
	published, repeated := backfillCounts(t, report)
	t.Logf("%s\n%d events on the promoted server (%d writes failed during the failover), %d records: %d repeated (%.1f%%); the backfill published %d rows, %d of them reported as possible repeats; %d in flight when the stream was lost",
		report, len(rows), failed.Load(), rep.records, rep.duplicates, 100*float64(rep.duplicates)/float64(len(rows)), published, repeated, inFlight)
	if !strings.Contains(report, "transaction snapshot") {
		t.Errorf("the backfill did not choose the rows by the checkpoint's transaction snapshot:\n%s", report)
	}
	if rep.duplicates*10 >= len(rows) {
		t.Errorf("%d of %d events arrived twice; want under 10%%", rep.duplicates, len(rows))
	}
	if rep.duplicates > repeated+inFlight {
		t.Errorf("%d events arrived twice, more than the %d the backfill reported it may repeat and the %d the lost stream had in flight", rep.duplicates, repeated, inFlight)
	}
}

// backfillReport matches the counts in the backfill's report.
var backfillReport = regexp.MustCompile(`published (\d+) outbox rows.* Of them, (\d+) may have been in Kafka already`)

func backfillCounts(t *testing.T, report string) (published, repeated int) {
	t.Helper()
	m := backfillReport.FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("the backfill's report does not say how many rows it published and how many may be repeats:\n%s", report)
	}
	published, _ = strconv.Atoi(m[1])
	repeated, _ = strconv.Atoi(m[2])
	return published, repeated
}

// steadyWriters commits, from each of n writers, a transaction of txnSize
// events every interval until stop closes; the channel closes once they
// have all stopped. Each writer has its own aggregates, numbered on.
func steadyWriters(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n, txnSize int, interval time.Duration, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for wr := range n {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			seq := map[int]int{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					b := &pgx.Batch{}
					for k := range txnSize {
						a := wr + n*((i*txnSize+k)%5)
						seq[a]++
						b.Queue(`INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'Happened', $2)`,
							aggID(a), fmt.Sprintf(`{"aggregate": %q, "seq": %d, "pad": "%s"}`, aggID(a), seq[a], pad))
					}
					return tx.SendBatch(ctx, b).Close()
				})
				if err != nil {
					t.Errorf("writer %d: %v", wr, err)
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// createTimestampedOutbox creates the outbox table with an insert-time
// column, created_at, the kind a backfill can choose rows by.
func createTimestampedOutbox(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	createOutbox(t, pool, "outbox")
	if _, err := pool.Exec(context.Background(), `ALTER TABLE outbox ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()`); err != nil {
		t.Fatal(err)
	}
}

// waitCheckpointSnapshot waits until the checkpoint topic's latest record
// for slot carries a transaction snapshot (txn_snapshot), which proves
// what a backfill after it need not publish again.
func waitCheckpointSnapshot(ctx context.Context, t *testing.T, brokers []string, slot string) {
	t.Helper()
	cl, err := kgo.NewClient(append(testenv.KafkaClientOpts(brokers),
		kgo.ConsumeTopics(sink.DefaultCheckpointTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(wctx)
		if wctx.Err() != nil {
			t.Fatalf("no checkpoint of slot %s with a transaction snapshot within a minute", slot)
		}
		found := false
		fs.EachRecord(func(r *kgo.Record) {
			if strings.HasSuffix(string(r.Key), "/"+slot) {
				found = bytes.Contains(r.Value, []byte(`"txn_snapshot"`))
			}
		})
		if found {
			return
		}
	}
}
