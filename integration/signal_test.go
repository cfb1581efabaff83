package integration

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestBinarySignals runs the built binary and stops it with signals, as
// Kubernetes and a terminal do: SIGTERM drains what is in flight, confirms
// the checkpoint and exits 0; when Kafka acknowledges nothing, the drain
// gives up after shutdown.timeout and still exits 0; a second signal
// during the drain ends the process at once.
func TestBinarySignals(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	const table = "outbox"
	createOutbox(t, pool, table)
	cluster, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	cfg := yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n  status_interval: 100ms\n", name, name))
	c := newCollector(t, brokers, "outbox.event.order")

	// A graceful stop: everything published, everything confirmed.
	p := runBinary(t, cfg)
	ep := binaryEndpoint(t, p)
	ep.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)
	workload{table: table, writers: 2, aggregates: 10, events: 200, txnSize: 4}.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, table), time.Minute)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	for _, want := range []string{"stop requested", "replication stopped", "outboxrelay stopped"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("the log of a graceful stop lacks %q", want)
		}
	}
	// Nothing the slot still holds is an insert: the stop confirmed
	// every event it published.
	if n := unconfirmedInserts(t, pool, name); n != 0 {
		t.Errorf("the slot holds %d unconfirmed inserts after a graceful stop, want 0", n)
	}
	// The check can see an insert: commit one more with the relay
	// stopped. (Commits may be asynchronous, and decoding reads only WAL
	// already written, hence the wait.)
	workload{table: table, writers: 1, aggregates: 1, events: 1}.write(ctx, t, pool)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := unconfirmedInserts(t, pool, name)
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot holds %d unconfirmed inserts after one more commit, want 1 (the check above counts nothing?)", n)
		}
	}

	// From now on Kafka answers every produce with a retriable error, so
	// nothing is ever acknowledged.
	stuck := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: -1})
	defer stuck.Remove()

	// The drain gives up after shutdown.timeout, and still exits 0: the
	// events stay unconfirmed and are published on the next start.
	p = runBinary(t, cfg, "OUTBOXRELAY_SHUTDOWN_TIMEOUT=2s", "OUTBOXRELAY_HTTP_READY_STALL_TIMEOUT=1s")
	ep = binaryEndpoint(t, p)
	waitInFlight(t, ep)
	ep.waitStatus(t, "/readyz", http.StatusServiceUnavailable, 30*time.Second, "progress: stalled")
	if status, body := ep.get(t, "/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz stalled for seconds (live_stall_timeout 5m) = %d:\n%s", status, body)
	}
	start := time.Now()
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after a drain that timed out, want 0", code)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 15*time.Second {
		t.Errorf("stopping took %s with shutdown.timeout 2s and nothing acknowledged", took)
	}
	if !strings.Contains(p.out.String(), "shutdown timeout passed") {
		t.Errorf("the log does not say the drain timed out")
	}

	// A second signal during a long drain ends the process at once.
	p = runBinary(t, cfg, "OUTBOXRELAY_SHUTDOWN_TIMEOUT=1m")
	ep = binaryEndpoint(t, p)
	waitInFlight(t, ep)
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatalf("exited on the first SIGTERM with events in flight and a minute to drain them:\n%s", p.out.String())
	case <-time.After(time.Second):
	}
	start = time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a second SIGTERM did not end the process within 10s")
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("after the second SIGTERM: %v, want killed by SIGTERM", p.cmd.ProcessState)
	}
	t.Logf("the second SIGTERM ended the process in %s", time.Since(start).Round(time.Millisecond))
}

var httpAddr = regexp.MustCompile(`component=http addr=(\S+)|"component":"http","addr":"([^"]+)"`)

// binaryEndpoint waits for the binary to log its HTTP address.
func binaryEndpoint(t *testing.T, p *proc) *endpoint {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := httpAddr.FindStringSubmatch(p.out.String()); m != nil {
			return &endpoint{base: "http://" + m[1] + m[2], seen: &syncBuffer{}}
		}
		if time.Now().After(deadline) {
			t.Fatalf("outboxrelay never logged its HTTP address:\n%s", p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitInFlight waits until the relay has events in flight.
func waitInFlight(t *testing.T, ep *endpoint) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := value(ep.scrape(t), "outboxrelay_events_in_flight"); n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no event in flight within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unconfirmedInserts counts the inserts the slot would send again: those
// after its confirmed_flush_lsn. It peeks, so it confirms nothing. The
// tests name the publication after the slot. A slot can be peeked only
// while no walsender holds it, and the server ends the relay's walsender a
// moment after the relay has exited, so it waits for that first.
func unconfirmedInserts(t *testing.T, pool *pgxpool.Pool, slot string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var active bool
		if err := pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil {
			t.Fatalf("look up slot %s: %v", slot, err)
		}
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s is still held by a walsender 30s after the relay exited", slot)
		}
	}
	var n int
	err := pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
			'proto_version', '1', 'publication_names', $2)
		WHERE substr(data, 1, 1) = 'I'`, slot, slot).Scan(&n)
	if err != nil {
		t.Fatalf("peek slot %s: %v", slot, err)
	}
	return n
}
