package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// defaultNamesCluster is a PostgreSQL cluster of its own with database app
// and the outbox table, for a relay with every name left at its default.
type defaultNamesCluster struct {
	url  string
	pool *pgxpool.Pool
}

func newDefaultNamesCluster(ctx context.Context, t *testing.T) defaultNamesCluster {
	t.Helper()
	url, err := testenv.PostgresServer(t).CreateDatabase(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	c := defaultNamesCluster{url: url, pool: connectPool(t, url)}
	createOutbox(t, c.pool, "outbox")
	return c
}

// insert commits n events of aggregate agg, numbered from first.
func (c defaultNamesCluster) insert(ctx context.Context, t *testing.T, agg string, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		if _, err := c.pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'Placed', $2)`,
			agg, fmt.Sprintf(`{"n": %d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTwoClustersDefaultNames: two PostgreSQL clusters, each with database
// app, their relays with the default slot, publication and checkpoint
// topic on one Kafka cluster. Both deliver every event, neither reports a
// lost slot: the second finds the first's checkpoint under the same
// database and slot names, sees that its last event is no row of its own
// table, says so once at INFO and goes on; a restart finds its own.
// `check` shows both records, and its verdict on the other one.
func TestTwoClustersDefaultNames(t *testing.T) {
	ctx := context.Background()
	a, b := newDefaultNamesCluster(ctx, t), newDefaultNamesCluster(ctx, t)
	_, brokers := testenv.Kafka(t)
	c := newCollector(t, brokers, "outbox.event.order")
	want := map[string]int{}
	wait := func(agg string, n int) {
		t.Helper()
		want[agg] += n
		deadline := time.Now().Add(time.Minute)
		for {
			got := 0
			for _, r := range c.recs {
				if string(r.Key) == agg {
					got++
				}
			}
			if got >= want[agg] {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d events of %s within a minute", got, want[agg], agg)
			}
			c.poll(ctx)
		}
	}

	pa := runBinary(t, firstFailureConfig(a.url, brokers[0], ""))
	binaryEndpoint(t, pa).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	a.insert(ctx, t, "a", 0, 5)
	wait("a", 5)

	// b's table holds an event before its relay first starts; check,
	// run then, judges a's checkpoint as the relay will.
	b.insert(ctx, t, "b", 0, 1)
	report := checkReport(t, b.url, brokers[0])
	for _, w := range []string{"PASS    checkpoint", "no checkpoint in outboxrelay.checkpoints for database \"app\", slot \"outboxrelay\"",
		"it holds another cluster's for the same names", "another relay's, since", "the relay starts on its own"} {
		if !strings.Contains(report, w) {
			t.Errorf("check before b's first start does not say %q:\n%s", w, report)
		}
	}
	pb := runBinary(t, firstFailureConfig(b.url, brokers[0], ""))
	binaryEndpoint(t, pb).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	b.insert(ctx, t, "b", 1, 5)
	a.insert(ctx, t, "a", 5, 5)
	wait("b", 5) // the one before b's slot existed is not relayed
	wait("a", 5)

	const other = "the checkpoint topic also holds another cluster's checkpoint"
	for name, p := range map[string]*proc{"a": pa, "b": pb} {
		lines := relayLog(t, p.out.String())
		others := 0
		for _, l := range lines {
			if strings.Contains(l.Msg, other) {
				others++
			}
			// b's event from before its slot existed is not relayed,
			// and b says so.
			if strings.Contains(l.Msg, "already holds rows committed before the replication slot existed") && name == "b" {
				continue
			}
			if l.Level == "WARN" || l.Level == "ERROR" || strings.Contains(l.Msg, "lost") {
				t.Errorf("relay %s: %s %s %s", name, l.Level, l.Msg, l.Err)
			}
		}
		if wantOthers := map[string]int{"a": 0, "b": 1}[name]; others != wantOthers {
			t.Errorf("relay %s says %d times %q, want %d", name, others, other, wantOthers)
		}
	}

	// b has its own checkpoint now, and check says so, and of a's.
	report = checkReport(t, b.url, brokers[0])
	for _, w := range []string{"PASS    checkpoint", "its own checkpoint in outboxrelay.checkpoints (database \"app\", slot \"outboxrelay\"", "the topic also holds the checkpoints of other clusters with the same database and slot names", "it can run"} {
		if !strings.Contains(report, w) {
			t.Errorf("check does not say %q:\n%s", w, report)
		}
	}

	// Restarted, b reads its own checkpoint and says nothing of a's.
	if code := pb.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("relay b exited %d", code)
	}
	pb = runBinary(t, firstFailureConfig(b.url, brokers[0], ""))
	binaryEndpoint(t, pb).waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	b.insert(ctx, t, "b", 6, 3)
	wait("b", 3)
	if strings.Contains(pb.out.String(), other) || strings.Contains(pb.out.String(), "lost") {
		t.Errorf("relay b, restarted:\n%s", pb.out.String())
	}
}

// checkReport is what `outboxrelay check` prints for the relay of url.
func checkReport(t *testing.T, url, broker string) string {
	t.Helper()
	cmd := exec.Command(binary(t), "check", "--config", writeTemp(t, "outboxrelay.yaml", firstFailureConfig(url, broker, "")))
	out, _ := cmd.CombinedOutput()
	return string(out)
}
