package sink

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSinkSaysNotEnoughReplicas: a topic whose min.insync.replicas (2) is
// more than its replicas in sync (1, on one broker), whose produces the
// broker refuses with NOT_ENOUGH_REPLICAS, as Kafka does (kfake keeps the
// setting but does not enforce it: a fault refuses in its place). The
// client retries without a word; the sink says, at WARN, which topic and
// partitions, with min.insync.replicas and the replicas in sync, again
// after a step while the records wait, and the record arrives once the
// refusals end.
func TestSinkSaysNotEnoughReplicas(t *testing.T) {
	defer func(a, m time.Duration) { stallAfter, stallStepMax = a, m }(stallAfter, stallStepMax)
	stallAfter, stallStepMax = time.Second, 2*time.Second
	const topic = "outbox.event.order"
	cluster, brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(newTestClient(t, brokers))
	two := "2"
	if _, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"min.insync.replicas": &two}, topic); err != nil {
		t.Fatal(err)
	}
	refusals := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1})

	var logs syncLog
	snk, err := New(Config{Brokers: brokers}, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	acked := make(chan error, 1)
	if err := snk.Publish(ctx, &connector.Message{Topic: topic, Key: []byte("a"), Value: []byte(`{}`), EventID: "e1"}, func(err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	want := []string{"level=WARN", "NOT_ENOUGH_REPLICAS", "topic=" + topic, "min_insync_replicas=2", "in_sync_replicas=1", "records_buffered=1"}
	for deadline := time.Now().Add(30 * time.Second); strings.Count(logs.String(), "min_insync_replicas=2") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not say twice, within 30s, why the record waits; it logged:\n%s", logs.String())
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "min_insync_replicas") {
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("the warning %q does not say %q", line, w)
				}
			}
		}
	}
	select {
	case err := <-acked:
		t.Fatalf("the record was settled (%v) while the broker refused it; want it retried", err)
	default:
	}
	t.Logf("the sink logged:\n%s", logs.String())
	if refusals.Hits() == 0 {
		t.Fatal("the fault refused no produce request; the test exercised nothing")
	}
	refusals.Remove()
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("the record failed with %v once the refusals ended", err)
		}
	case <-ctx.Done():
		t.Fatal("the record was not acknowledged once the refusals ended")
	}
}
