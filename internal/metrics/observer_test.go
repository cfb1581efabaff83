package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outboxrelay/outboxrelay/connector"
)

// oneBatch is a source that offers one batch, then waits for its end.
type oneBatch struct{ b connector.Batch }

func (s oneBatch) Run(ctx context.Context, out chan<- connector.Batch) error {
	select {
	case out <- s.b:
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}

// TestRunnerWithMetrics wires the metrics to a runner as the relay does:
// the sink counts each event by topic, the dead letter topic keeps a series
// of its own past the bound, the runner's hooks count the batch and the
// dead letter, and once the runner has returned nothing is held.
func TestRunnerWithMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, WithMaxTopics(1), WithDeadLetterTopic("dlq"))
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id, typ string) connector.Event {
		return connector.Event{ID: id, AggregateType: typ, AggregateID: "a-" + id, Payload: []byte(`{}`)}
	}
	bad := ev("bad", "order")
	bad.Invalid = &connector.EventError{EventID: "bad", Err: errors.New(`column "aggregateid" is NULL`)}
	done := make(chan error, 1)
	src := oneBatch{connector.Batch{Events: []connector.Event{ev("e1", "order"), ev("e2", "invoice"), bad}, Done: func(err error) { done <- err }}}
	m.ExportSource(src)
	r, err := connector.NewRunner(src, m.Sink(ackSink{}), connector.RunnerConfig{DeadLetterTopic: "dlq"}, connector.WithObserver(m.Observer()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- r.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Done(%v), want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the batch was not done within 30s")
	}
	cancel()
	if err := <-ended; err != nil {
		t.Fatalf("Run: %v", err)
	}

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"published outbox.event.order", testutil.ToFloat64(m.published.WithLabelValues("outbox.event.order")), 1},
		{"published past the bound", testutil.ToFloat64(m.published.WithLabelValues(OtherTopics)), 1},
		{"published dlq", testutil.ToFloat64(m.published.WithLabelValues("dlq")), 1},
		{"dead lettered", testutil.ToFloat64(m.deadLettered), 1},
		{"restarts", testutil.ToFloat64(m.restarts), 0},
		{"in flight", gauge(t, reg, "outboxrelay_events_in_flight"), 0},
		{"source up", gauge(t, reg, "outboxrelay_source_up"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if p := m.Progress(); p.SourceRunning || p.SourceErr != nil || !p.WaitingSince.IsZero() {
		t.Errorf("after Run: %+v; want not running, no error, no batch held", p)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "outboxrelay_batch_events" {
			if h := mf.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
				t.Errorf("batch histogram: %d batches, %v events; want 1 batch of 3", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
}

// TestWatchKeepsTheLastMomentUp: with no probe or scrape for a long while,
// Watch still notes that the source is up, so that the first probe after
// the source went down dates its fall from then, not from the last probe.
func TestWatchKeepsTheLastMomentUp(t *testing.T) {
	m, _, clk := newTestMetrics(t)
	fs := &streamingSource{}
	fs.set(true, false)
	m.ExportSource(fs)
	m.Observer().SourceStarted()
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.Watch(ctx)
	}()
	defer func() {
		cancel()
		<-watched
	}()

	clk.add(10 * time.Minute)
	upAt := clk.now()
	seen := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.lastUp.Equal(upAt)
	}
	for deadline := time.Now().Add(30 * time.Second); !seen(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not look at the source within 30s")
		}
	}
	fs.set(false, false)
	clk.add(time.Minute)
	if p := m.Progress(); !p.DownSince.Equal(upAt) {
		t.Errorf("down since %s, want %s: the last moment Watch saw the source up", p.DownSince, upAt)
	}
}
