package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// Two relays on one slot with exactly_once, the second waiting as a
// standby. The active one is frozen (SIGSTOP) mid-stream, with a Kafka
// transaction open and records in its producer, and meanwhile another
// producer loads its transactional id, as a successor does when it takes
// over: the id's epoch moves on and the broker aborts the open
// transaction. The freeze is far shorter than the walsender's timeout, so
// the frozen relay wakes still holding its slot session and goes on
// writing: Kafka refuses it as fenced, and it must stop with the fenced
// ERROR (exit 1), not restart, not wait as a standby. The standby then
// takes the slot over and goes on from the committed checkpoint. A
// read_committed consumer sees every event once and in order: nothing of
// the fenced relay's aborted transaction.
func TestExactlyOnceStaleRelayFenced(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	txnID := "outboxrelay-fenced-" + name
	// receive_timeout, and with it the session's wal_sender_timeout, is
	// far longer than the freeze: the server keeps the frozen relay's
	// session, so the standby cannot take the slot, and the relay wakes
	// into a live stream.
	cfg := yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 200ms\n  receive_timeout: 60s\n", name, name))
	env := []string{"OUTBOXRELAY_KAFKA_DELIVERY=exactly_once", "OUTBOXRELAY_KAFKA_TRANSACTIONAL_ID=" + txnID}
	ctx := context.Background()
	a := runBinary(t, cfg, env...)
	waitSlotActive(ctx, t, pool, name)
	b := runBinary(t, cfg, env...)
	waitLog(t, b, "as a standby", 30*time.Second)

	w := workload{table: "outbox", writers: 2, aggregates: 20, events: 4000, txnSize: 2}
	written := w.writeInBackground(ctx, t, pool)
	c := newCollector(t, brokers, "outbox.event.order")
	c.readAtLeast(ctx, t, 200, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	fenceTransactionalID(ctx, t, brokers, txnID)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// More events, so that the woken relay has something to write even if
	// the first ones were all in its hands before the freeze.
	<-written
	w.seqBase = 4000 / 20
	more := w.writeInBackground(ctx, t, pool)
	if code := a.exit(t, time.Minute); code != 1 {
		t.Fatalf("the fenced relay exited %d, want 1:\n%s", code, lastLines(a.out.String(), 10))
	}
	if reason := a.stopReason(t); !strings.Contains(reason, "took over its transactional id") {
		t.Errorf("the fenced relay stopped with %q; want the fenced error saying another instance took over its transactional id", reason)
	}
	if strings.Contains(a.out.String(), "waiting for it to let go, as a standby") {
		t.Errorf("the fenced relay waited as a standby; it kept its slot session, so Kafka's fencing, not the slot, must have stopped it:\n%s", lastLines(a.out.String(), 10))
	}
	waitLog(t, b, "taking it over", time.Minute)
	<-more
	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	c.settle(time.Second)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated; the successor must resume right after the committed checkpoint, and the fenced relay's transaction must be aborted", rep.duplicates)
	}
	if code := b.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("the successor exited %d after SIGTERM, want 0", code)
	}
	t.Logf("the fenced relay's last lines:\n%s", lastLines(a.out.String(), 4))
}

// fenceTransactionalID loads a producer id for id from a client of its
// own, as an instance taking id over does: the id's epoch moves on, the
// broker aborts the transaction the earlier holder left open, and that
// holder can no longer write or commit.
func fenceTransactionalID(ctx context.Context, t *testing.T, brokers []string, id string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(id))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		t.Fatalf("fence transactional id %q: %v", id, err)
	}
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
