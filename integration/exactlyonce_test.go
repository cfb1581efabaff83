package integration

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// startExactlyOnce runs a CDC relay with kafka.delivery exactly_once in
// the test process, as the app wires it: a transactional sink, which
// writes the checkpoints in its transactions.
func (e *env) startExactlyOnce(t *testing.T, logs *syncBuffer) *relay {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	snk, err := sink.New(sink.Config{Brokers: e.brokers, TransactionalID: "outboxrelay-test-" + e.name},
		sink.WithLogger(log), sink.WithClientOptions(kgo.MetadataMinAge(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
		return sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", key, sink.WithTransactions(snk))
	}
	src, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name,
		StatusInterval: 100 * time.Millisecond}, cdc.WithLogger(log), cdc.WithCheckpoints(open, "test"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := connector.NewRunner(src, snk, connector.RunnerConfig{RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond},
		connector.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rl := &relay{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := r.Run(ctx)
		src.Close()
		snk.Close()
		rl.done <- err
	}()
	t.Cleanup(func() {
		rl.stop(t)
		if t.Failed() {
			t.Logf("relay log:\n%s", logs.String())
		}
	})
	return rl
}

// A broker that refuses one batch with an error the producer does not
// retry, mid-stream: in at-least-once mode the partition's later batches
// may land before the refused events come again (testBrokerErrors). With
// exactly_once the refusal aborts the whole transaction, the relay starts
// again from the committed checkpoint, and a read_committed consumer sees
// every event once, in commit order per aggregate.
func TestExactlyOnceRefusedBatch(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	var logs syncBuffer
	r := e.startExactlyOnce(t, &logs)
	waitSlotActive(ctx, t, e.pool, e.name)
	c := newCollector(t, e.brokers, "outbox.event.order")
	w := workload{table: e.table, writers: 4, aggregates: 40, events: 1600}
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), 2*time.Minute)

	fatal := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: 3})
	w.seqBase = 1600 / 40
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	if fatal.Hits() == 0 {
		t.Fatal("the fault answered no produce request; the test did not exercise it")
	}
	c.settle(300 * time.Millisecond)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated; a read_committed consumer must see each event once", rep.duplicates)
	}
	if !strings.Contains(logs.String(), "aborted the Kafka transaction") {
		t.Errorf("the log does not say the transaction was aborted:\n%s", logs.String())
	}
}

// killFiveTimes kills the binary with SIGKILL five times, 3s apart, while
// 30,000 events commit at 2,000 a second (100 aggregates), and checks
// every record as a read_committed consumer: nothing lost, commit order
// per aggregate. With poll set, two poller instances run and the one
// killed alternates. It returns what the check found.
func killFiveTimes(t *testing.T, poll bool, env ...string) report {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	ctx := context.Background()
	procs := make([]*proc, 1)
	cfg := yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n", name, name))
	if poll {
		applyBinaryPollDDL(t, url)
		cfg = yamlConfig(url, brokers, "source: poll\npoll:\n  interval: 100ms\n  batch_size: 500\n")
		procs = make([]*proc, 2)
	}
	for i := range procs {
		procs[i] = runBinary(t, cfg, env...)
	}
	if !poll {
		waitSlotActive(ctx, t, pool, name)
	}

	// 20 events every 10ms, each transaction spread over the aggregates,
	// numbered per aggregate in commit order.
	written := make(chan error, 1)
	go func() {
		seq := map[int]int{}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := range 1500 {
			<-tick.C
			tx, err := pool.Begin(ctx)
			if err != nil {
				written <- err
				return
			}
			for j := range 20 {
				a := (i*20 + j) % 100
				seq[a]++
				if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'T', $2)`,
					aggID(a), fmt.Sprintf(`{"seq": %d}`, seq[a])); err != nil {
					written <- err
					return
				}
			}
			if err := tx.Commit(ctx); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	c := newCollector(t, brokers, "outbox.event.order")
	for i := range 5 {
		time.Sleep(3 * time.Second)
		k := i % len(procs)
		procs[k].signal(t, syscall.SIGKILL, 10*time.Second)
		procs[k] = runBinary(t, cfg, env...)
	}
	if err := <-written; err != nil {
		t.Fatalf("write the events: %v", err)
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
	}
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if poll {
		if left := countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); left != 0 {
			t.Errorf("%d rows left unpublished", left)
		}
	}
	t.Logf("%d records for %d events after five SIGKILLs: %d repeated (%.1f%%)",
		rep.records, len(rows), rep.duplicates, 100*float64(rep.duplicates)/float64(len(rows)))
	return rep
}

// With exactly_once, the five SIGKILLs repeat nothing a read_committed
// consumer sees: what a killed relay had not committed is aborted when
// the next one fences its transactional id, and the next one resumes
// right after the committed checkpoint.
func TestExactlyOnceKilledFiveTimes(t *testing.T) {
	t.Parallel() // as TestCDCBinaryKilledFiveTimes
	if rep := killFiveTimes(t, false, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once"); rep.duplicates != 0 {
		t.Errorf("%d events repeated; with exactly_once a read_committed consumer sees each once", rep.duplicates)
	}
}

// Two poller instances with exactly_once, each SIGKILLed in turn: each
// instance publishes in its own Kafka transactions and marks its rows in
// the claim's PostgreSQL transaction just before the Kafka one commits,
// then commits that one. What a killed instance had not committed in
// Kafka is aborted by the broker and claimed again; what it had committed
// in Kafka but not in PostgreSQL (one COMMIT round trip) would be claimed
// and published again, the one window left open: a kill lands in it
// seldom, and each such kill repeats at most one claim (batch_size).
func TestExactlyOncePollKilled(t *testing.T) {
	t.Parallel() // as TestCDCBinaryKilledFiveTimes
	rep := killFiveTimes(t, true, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once")
	if rep.duplicates > 5*500 {
		t.Errorf("%d events repeated; five kills can each repeat at most one claim of 500", rep.duplicates)
	}
}

// Two relays on one slot with exactly_once: the active one is frozen
// (SIGSTOP) for longer than its walsender's timeout while events commit,
// the standby takes the slot over, fences the frozen one's transactional
// id and goes on from the committed checkpoint; then the frozen one
// wakes, with records still in its producer. A read_committed consumer
// sees every event once and in order: nothing of the stale relay lands
// after its successor's records.
func TestExactlyOnceStaleRelayFenced(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	cfg := yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 200ms\n  receive_timeout: 2s\n", name, name))
	env := "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once"
	ctx := context.Background()
	a := runBinary(t, cfg, env)
	waitSlotActive(ctx, t, pool, name)
	b := runBinary(t, cfg, env)
	waitLog(t, b, "as a standby", 30*time.Second)

	w := workload{table: "outbox", writers: 2, aggregates: 20, events: 4000, txnSize: 2}
	written := w.writeInBackground(ctx, t, pool)
	c := newCollector(t, brokers, "outbox.event.order")
	c.readAtLeast(ctx, t, 200, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, b, "taking it over", time.Minute)
	<-written
	// The successor publishes past where the frozen relay stopped.
	before := len(c.recs)
	c.readAtLeast(ctx, t, before+100, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	w.seqBase = 4000 / 20
	w.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	c.settle(time.Second)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated; the successor must resume right after the committed checkpoint", rep.duplicates)
	}
	if code := b.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("the successor exited %d after SIGTERM, want 0", code)
	}
	// Woken, the stale relay either finds its stream dead and waits as a
	// standby, or tries to write first, is refused as fenced, and stops.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(a.out.String(), "took over its transactional id") && !strings.Contains(a.out.String(), "as a standby") {
		if time.Now().After(deadline) {
			t.Fatalf("the stale relay neither stopped as fenced nor waits as a standby:\n%s", lastLines(a.out.String(), 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the stale relay after it woke:\n%s", lastLines(a.out.String(), 6))
}

// waitLog waits until the binary's output holds text.
func waitLog(t *testing.T, p *proc, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.out.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("after %s the relay has not logged %q:\n%s", timeout, text, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Two poller instances with exactly_once; one is frozen (SIGSTOP) just as
// it asks the broker to commit a claim's Kafka transaction, after its
// claim proved it still held its rows, and stays frozen longer than
// PostgreSQL lets the claim's session idle (4 x postgres.query_timeout).
// The other takes its buckets over and publishes their rows; then it
// wakes, and its commit request reaches the broker. The transaction has
// timed out meanwhile (the poller's transaction timeout is half that idle
// time), so nothing the frozen one wrote is visible to a read_committed
// consumer: every event once, in order.
func TestExactlyOncePollFrozenInstance(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	cluster, brokers := testenv.Kafka(t)
	ctx := context.Background()
	applyBinaryPollDDL(t, url)
	// A claim's session may idle 4s; a Kafka transaction lasts at most 2s.
	cfg := yamlConfig(url, brokers, "source: poll\npoll:\n  interval: 100ms\n  batch_size: 200\n")
	cfg = strings.Replace(cfg, "postgres:\n", "postgres:\n  query_timeout: 1s\n", 1)
	env := "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once"
	a, b := runBinary(t, cfg, env), runBinary(t, cfg, env)
	waitLog(t, a, "transactional_id=", 30*time.Second)
	id := regexp.MustCompile(`transactional_id=(\S+)`).FindStringSubmatch(a.out.String())[1]

	w := workload{table: "outbox", writers: 2, aggregates: 20, events: 4000, txnSize: 2}
	written := w.writeInBackground(ctx, t, pool)
	c := newCollector(t, brokers, "outbox.event.order")
	c.readAtLeast(ctx, t, 400, time.Minute)
	frozen, wake := make(chan struct{}), make(chan struct{})
	cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r := req.(*kmsg.EndTxnRequest); r.TransactionalID != id || !r.Commit {
			return nil, nil, false
		}
		cluster.DropControl()
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Error(err)
		}
		close(frozen)
		// The request waits, as if sent when the instance wakes.
		cluster.SleepControl(func() { <-wake })
		return nil, nil, false
	})
	select {
	case <-frozen:
	case <-time.After(time.Minute):
		t.Fatal("the instance never committed a Kafka transaction")
	}
	<-written
	// Only the other instance runs: once PostgreSQL has ended the frozen
	// one's claim, it publishes every row, the frozen one's buckets too.
	deadline := time.Now().Add(time.Minute)
	for countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("rows still unpublished a minute after the writes, with one instance frozen:\n%s", lastLines(b.out.String(), 10))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	close(wake)
	w.seqBase = 4000 / 20
	w.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	c.settle(time.Second)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated; the frozen instance's Kafka transaction must have timed out before its rows were claimed again", rep.duplicates)
	}
	for name, p := range map[string]*proc{"woken": a, "other": b} {
		if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
			t.Errorf("the %s instance exited %d after SIGTERM, want 0:\n%s", name, code, lastLines(p.out.String(), 10))
		}
	}
	t.Logf("the woken instance:\n%s", lastLines(a.out.String(), 8))
}
