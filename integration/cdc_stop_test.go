package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestCDCGracefulStopFinishesLargeTransaction: a transaction larger than
// cdc.max_batch_events goes to Kafka in parts, and only its end can be
// confirmed. A graceful stop that comes when part of it is in Kafka takes
// the rest and confirms it, so the next start repeats none of it.
func TestCDCGracefulStopFinishesLargeTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	e.captureFromNow(ctx, t)
	const events = 3000
	workload{table: e.table, writers: 1, aggregates: 20, events: events, txnSize: events}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	// Every produce request waits a little, and the producer holds 200
	// records at most, so that the transaction's 30 parts take most of a
	// second to reach Kafka and the runner is still taking them when it
	// is told to stop.
	var produces atomic.Int64
	e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		produces.Add(1)
		e.cluster.SleepControl(func() { time.Sleep(20 * time.Millisecond) })
		return nil, nil, false
	})

	cfg := cdc.Config{URL: e.url, Table: "public.outbox", Slot: e.name, Publication: e.name, MaxBatchEvents: 100}
	sc := sink.Config{MaxBufferedRecords: 200}
	r := startRelay(t, openCDC(t, cfg), e.brokers, connector.RunnerConfig{}, sc)
	// Stop once two produce requests have come, by the relay's progress
	// rather than a consumer's, which a loaded machine may hold back: the
	// transaction needs at least events/200 of them.
	for deadline := time.Now().Add(time.Minute); produces.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay sent %d produce requests in a minute", produces.Load())
		}
	}
	if n := produces.Load(); n >= events/200 {
		t.Fatalf("%d produce requests came before the stop, enough for the whole transaction; the test exercised nothing", n)
	}
	r.stop(t)
	c := newCollector(t, e.brokers, "outbox.event.order")

	r = startRelay(t, openCDC(t, cfg), e.brokers, connector.RunnerConfig{}, sc)
	defer r.stop(t)
	c.waitFor(t, rows, time.Minute)
	c.settle(2 * time.Second)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d of %d events were published again after a graceful stop in the middle of their transaction", rep.duplicates, events)
	}
}
