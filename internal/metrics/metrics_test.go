package metrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outboxrelay/outboxrelay/connector"
)

// fakeSink is a connector.Sink that keeps the done callbacks for the test
// to call, or refuses messages with refuse.
type fakeSink struct {
	mu     sync.Mutex
	dones  []func(error)
	refuse error
}

func (s *fakeSink) Publish(_ context.Context, _ *connector.Message, done func(error)) error {
	if s.refuse != nil {
		return s.refuse
	}
	s.mu.Lock()
	s.dones = append(s.dones, done)
	s.mu.Unlock()
	return nil
}
func (s *fakeSink) Flush(context.Context) error { return nil }
func (s *fakeSink) Abort(context.Context) error { return nil }

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry, *clock) {
	t.Helper()
	clk := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	m, err := New(reg, WithClock(clk.now), WithBuildInfo("v1.2.3"))
	if err != nil {
		t.Fatal(err)
	}
	return m, reg, clk
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestSinkCountsAcknowledgements(t *testing.T) {
	m, reg, clk := newTestMetrics(t)
	fs := &fakeSink{}
	s := m.Sink(fs)
	ctx := context.Background()
	commit := clk.now()
	var acked []error
	publish := func(topic string, headers ...connector.Header) {
		t.Helper()
		err := s.Publish(ctx, &connector.Message{Topic: topic, Timestamp: commit, Headers: headers}, func(err error) { acked = append(acked, err) })
		if err != nil {
			t.Fatal(err)
		}
	}
	publish("outbox.event.order")
	clk.add(time.Second)
	publish("outbox.event.order")
	publish("outbox.event.customer")
	publish("dlq", connector.Header{Key: connector.HeaderError, Value: []byte("too large")})

	if got := gauge(t, reg, "outboxrelay_events_in_flight"); got != 4 {
		t.Errorf("in flight = %v, want 4", got)
	}
	clk.add(2 * time.Second)
	if got := gauge(t, reg, "outboxrelay_oldest_unpublished_event_age_seconds"); got != 3 {
		t.Errorf("oldest age = %v, want 3 (seconds since the first commit)", got)
	}
	p := m.Progress()
	if p.InFlight != 4 || p.Stalled(clk.now()) != 3*time.Second {
		t.Errorf("progress = %+v, stalled %s; want 4 in flight stalled 3s", p, p.Stalled(clk.now()))
	}

	// Acknowledgements arrive out of order across partitions.
	fs.dones[1](nil)
	fs.dones[3](nil)
	fs.dones[2](errors.New("broker gone"))
	if got := gauge(t, reg, "outboxrelay_oldest_unpublished_event_age_seconds"); got != 3 {
		t.Errorf("oldest age with the first event still in flight = %v, want 3", got)
	}
	fs.dones[0](nil)

	if len(acked) != 4 {
		t.Errorf("the runner's done was called %d times, want 4", len(acked))
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"published order", testutil.ToFloat64(m.published.WithLabelValues("outbox.event.order")), 2},
		{"published dlq", testutil.ToFloat64(m.published.WithLabelValues("dlq")), 1},
		{"published customer", testutil.ToFloat64(m.published.WithLabelValues("outbox.event.customer")), 0},
		{"errors customer", testutil.ToFloat64(m.publishErrors.WithLabelValues("outbox.event.customer")), 1},
		{"in flight", gauge(t, reg, "outboxrelay_events_in_flight"), 0},
		{"oldest age", gauge(t, reg, "outboxrelay_oldest_unpublished_event_age_seconds"), 0},
		{"build info", gauge(t, reg, "outboxrelay_build_info"), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Three acknowledged events, each 3s after its commit.
	want := `
# HELP outboxrelay_event_latency_seconds Time from an event's record timestamp (by default its commit in PostgreSQL) to Kafka's acknowledgement of it.
# TYPE outboxrelay_event_latency_seconds histogram
outboxrelay_event_latency_seconds_bucket{le="0.005"} 0
outboxrelay_event_latency_seconds_bucket{le="0.01"} 0
outboxrelay_event_latency_seconds_bucket{le="0.025"} 0
outboxrelay_event_latency_seconds_bucket{le="0.05"} 0
outboxrelay_event_latency_seconds_bucket{le="0.1"} 0
outboxrelay_event_latency_seconds_bucket{le="0.25"} 0
outboxrelay_event_latency_seconds_bucket{le="0.5"} 0
outboxrelay_event_latency_seconds_bucket{le="1"} 0
outboxrelay_event_latency_seconds_bucket{le="2.5"} 0
outboxrelay_event_latency_seconds_bucket{le="5"} 3
outboxrelay_event_latency_seconds_bucket{le="10"} 3
outboxrelay_event_latency_seconds_bucket{le="30"} 3
outboxrelay_event_latency_seconds_bucket{le="60"} 3
outboxrelay_event_latency_seconds_bucket{le="120"} 3
outboxrelay_event_latency_seconds_bucket{le="300"} 3
outboxrelay_event_latency_seconds_bucket{le="600"} 3
outboxrelay_event_latency_seconds_bucket{le="+Inf"} 3
outboxrelay_event_latency_seconds_sum 9
outboxrelay_event_latency_seconds_count 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outboxrelay_event_latency_seconds"); err != nil {
		t.Error(err)
	}
}

func TestSinkCountsRefusedMessages(t *testing.T) {
	m, reg, _ := newTestMetrics(t)
	refusal := &connector.EventError{EventID: "e1", Err: &connector.RecordTooLargeError{Size: 10, Limit: 5}}
	s := m.Sink(&fakeSink{refuse: refusal})
	called := false
	err := s.Publish(context.Background(), &connector.Message{Topic: "t"}, func(error) { called = true })
	if !errors.Is(err, refusal) {
		t.Fatalf("Publish = %v, want the sink's refusal passed through", err)
	}
	if called {
		t.Error("done was called for a message the sink refused")
	}
	if got := testutil.ToFloat64(m.publishErrors.WithLabelValues("t")); got != 1 {
		t.Errorf("publish errors = %v, want 1", got)
	}
	if got := gauge(t, reg, "outboxrelay_events_in_flight"); got != 0 {
		t.Errorf("in flight = %v, want 0 after a refusal", got)
	}
}

// A settled message's flight is reused for a later one, which must then be
// counted as itself: its topic, its commit, its done.
func TestSinkReusesFlights(t *testing.T) {
	m, reg, clk := newTestMetrics(t)
	fs := &fakeSink{}
	s := m.Sink(fs)
	ctx := context.Background()
	var acked []string
	publish := func(topic string, commit time.Time) {
		t.Helper()
		if err := s.Publish(ctx, &connector.Message{Topic: topic, Timestamp: commit}, func(error) { acked = append(acked, topic) }); err != nil {
			t.Fatal(err)
		}
	}
	first := clk.now()
	publish("a", first)
	publish("b", first)
	fs.dones[1](nil)
	fs.dones[0](nil)
	clk.add(10 * time.Second)
	publish("c", clk.now())
	publish("d", clk.now())
	clk.add(time.Second)
	fs.dones[3](errors.New("broker gone"))
	if got := gauge(t, reg, "outboxrelay_oldest_unpublished_event_age_seconds"); got != 1 {
		t.Errorf("oldest age = %v, want 1 (c's, not a's)", got)
	}
	fs.dones[2](nil)
	if want := []string{"b", "a", "d", "c"}; !slices.Equal(acked, want) {
		t.Errorf("dones called for %v, want %v", acked, want)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"published a", testutil.ToFloat64(m.published.WithLabelValues("a")), 1},
		{"published c", testutil.ToFloat64(m.published.WithLabelValues("c")), 1},
		{"published d", testutil.ToFloat64(m.published.WithLabelValues("d")), 0},
		{"errors d", testutil.ToFloat64(m.publishErrors.WithLabelValues("d")), 1},
		{"error series (d's only)", float64(testutil.CollectAndCount(m.publishErrors)), 1},
		{"in flight", gauge(t, reg, "outboxrelay_events_in_flight"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// a and b acknowledged as they were committed, c a second after.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxrelay_event_latency_seconds Time from an event's record timestamp (by default its commit in PostgreSQL) to Kafka's acknowledgement of it.
# TYPE outboxrelay_event_latency_seconds histogram
outboxrelay_event_latency_seconds_bucket{le="0.005"} 2
outboxrelay_event_latency_seconds_bucket{le="0.01"} 2
outboxrelay_event_latency_seconds_bucket{le="0.025"} 2
outboxrelay_event_latency_seconds_bucket{le="0.05"} 2
outboxrelay_event_latency_seconds_bucket{le="0.1"} 2
outboxrelay_event_latency_seconds_bucket{le="0.25"} 2
outboxrelay_event_latency_seconds_bucket{le="0.5"} 2
outboxrelay_event_latency_seconds_bucket{le="1"} 3
outboxrelay_event_latency_seconds_bucket{le="2.5"} 3
outboxrelay_event_latency_seconds_bucket{le="5"} 3
outboxrelay_event_latency_seconds_bucket{le="10"} 3
outboxrelay_event_latency_seconds_bucket{le="30"} 3
outboxrelay_event_latency_seconds_bucket{le="60"} 3
outboxrelay_event_latency_seconds_bucket{le="120"} 3
outboxrelay_event_latency_seconds_bucket{le="300"} 3
outboxrelay_event_latency_seconds_bucket{le="600"} 3
outboxrelay_event_latency_seconds_bucket{le="+Inf"} 3
outboxrelay_event_latency_seconds_sum 1
outboxrelay_event_latency_seconds_count 3
`), "outboxrelay_event_latency_seconds"); err != nil {
		t.Error(err)
	}
}

func TestStalled(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		p    Progress
		want time.Duration
	}{
		{"idle", Progress{}, 0},
		{"in flight", Progress{InFlight: 3, OldestSent: now.Add(-5 * time.Second)}, 5 * time.Second},
		{"batch waiting", Progress{WaitingSince: now.Add(-7 * time.Second)}, 7 * time.Second},
		{"both, the older wins", Progress{InFlight: 1, OldestSent: now.Add(-2 * time.Second), WaitingSince: now.Add(-9 * time.Second)}, 9 * time.Second},
		{"clock stepped back", Progress{InFlight: 1, OldestSent: now.Add(time.Second)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Stalled(now); got != c.want {
				t.Errorf("Stalled = %s, want %s", got, c.want)
			}
		})
	}
}

// fakeSource is a source that knows how many changes it skipped.
type fakeSource struct {
	skipped int64
}

func (s *fakeSource) Run(ctx context.Context, _ chan<- connector.Batch) error {
	<-ctx.Done()
	return nil
}

func (s *fakeSource) SkippedChanges() int64 { return s.skipped }

// TestObserverFollowsTheRunner: the runner's hooks count the batches and
// the restarts, and give the probes the source's state and the batch the
// runner holds.
func TestObserverFollowsTheRunner(t *testing.T) {
	m, reg, clk := newTestMetrics(t)
	m.ExportSource(&fakeSource{skipped: 7})
	obs := m.Observer()

	obs.SourceStarted()
	if !m.Progress().SourceRunning {
		t.Error("source not running after SourceStarted")
	}
	for _, n := range []int{3, 1000} {
		obs.BatchTaken(n)
		obs.BatchHandedOver()
	}
	obs.BatchTaken(2)
	taken := clk.now()
	clk.add(5 * time.Second)
	if p := m.Progress(); !p.WaitingSince.Equal(taken) || p.Stalled(clk.now()) != 5*time.Second {
		t.Errorf("while the runner holds a batch: %+v, stalled %s; want waiting since it was taken, 5s", p, p.Stalled(clk.now()))
	}
	obs.BatchHandedOver()
	if p := m.Progress(); !p.WaitingSince.IsZero() {
		t.Errorf("after the batch was handed over: waiting since %s, want nothing waiting", p.WaitingSince)
	}
	lost := errors.New("connection lost")
	obs.SourceStopped(lost)
	if p := m.Progress(); p.SourceRunning || !errors.Is(p.SourceErr, lost) {
		t.Errorf("after the run: %+v; want not running, its error kept", p)
	}
	if got := testutil.ToFloat64(m.restarts); got != 0 {
		t.Errorf("restarts = %v before a second run, want 0", got)
	}

	// A second run is a restart, and forgets the last one's error.
	obs.SourceStarted()
	if p := m.Progress(); !p.SourceRunning || p.SourceErr != nil {
		t.Errorf("in the second run: %+v; want running, no error", p)
	}
	if got := testutil.ToFloat64(m.restarts); got != 1 {
		t.Errorf("restarts = %v after two runs, want 1", got)
	}
	obs.DeadLettered(connector.DeadLetter{EventID: "e9", Topic: "outbox.event.order", Reason: "too large"})
	if got := testutil.ToFloat64(m.deadLettered); got != 1 {
		t.Errorf("dead lettered = %v, want 1", got)
	}
	want := `
# HELP outboxrelay_skipped_changes_total Changes of the outbox table that are not events (UPDATE, DELETE, TRUNCATE), and non-transactional logical decoding messages of a cdc.message_prefixes prefix, skipped (cdc only).
# TYPE outboxrelay_skipped_changes_total counter
outboxrelay_skipped_changes_total 7
# HELP outboxrelay_source_up 1 while the source is connected (cdc: streams from its slot; poll: claims); 0 while it connects, reconnects, waits for the slot, or waits to be restarted after an error.
# TYPE outboxrelay_source_up gauge
outboxrelay_source_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outboxrelay_skipped_changes_total", "outboxrelay_source_up"); err != nil {
		t.Error(err)
	}
	obs.SourceStopped(nil)
	if got := gauge(t, reg, "outboxrelay_source_up"); got != 0 {
		t.Errorf("source_up = %v after the run, want 0", got)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "outboxrelay_batch_events" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() != 1005 {
				t.Errorf("batch histogram: %d batches, %v events; want 3 batches of 1005 events", h.GetSampleCount(), h.GetSampleSum())
			}
		}
		if mf.GetName() == "outboxrelay_unpublished_events" || mf.GetName() == "outboxrelay_cdc_confirmed_lsn" {
			t.Errorf("%s exported for a source that does not know it", mf.GetName())
		}
	}
}

// backlogSource is a poller-like source that knows its backlog.
type backlogSource struct {
	fakeSource
	backlogs []connector.Backlog
	err      error
}

func (s *backlogSource) Backlogs(context.Context) ([]connector.Backlog, error) {
	return s.backlogs, s.err
}

// TestBacklog: a series per outbox table, and the oldest of all their
// events in the age.
func TestBacklog(t *testing.T) {
	m, reg, clk := newTestMetrics(t)
	bs := &backlogSource{backlogs: []connector.Backlog{
		{Table: "sales.outbox", Events: 42, Oldest: clk.now().Add(-time.Minute)},
		{Table: "billing.outbox", Events: 7, Oldest: clk.now().Add(-2 * time.Minute)},
	}}
	m.ExportSource(bs)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "outboxrelay_unpublished_events" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "table" {
					got[l.GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
	}
	if len(got) != 2 || got["sales.outbox"] != 42 || got["billing.outbox"] != 7 {
		t.Errorf("unpublished by table = %v, want sales.outbox 42 and billing.outbox 7", got)
	}
	if got := gauge(t, reg, "outboxrelay_oldest_unpublished_event_age_seconds"); got != 120 {
		t.Errorf("oldest age = %v, want 120 from billing.outbox's backlog", got)
	}
	bs.err = errors.New("table locked")
	if got := gauge(t, reg, "outboxrelay_backlog_query_errors"); got != 1 {
		t.Errorf("backlog errors = %v, want 1", got)
	}
}

// streamingSource is a source that says whether it streams.
type streamingSource struct {
	mu                 sync.Mutex
	streaming, standby bool
}

func (s *streamingSource) Run(ctx context.Context, _ chan<- connector.Batch) error {
	<-ctx.Done()
	return nil
}

func (s *streamingSource) Streaming() (bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streaming, s.standby
}

func (s *streamingSource) set(streaming, standby bool) {
	s.mu.Lock()
	s.streaming, s.standby = streaming, standby
	s.mu.Unlock()
}

// TestSourceUpFollowsTheStream: a running source that has lost its stream
// is not up, and the liveness probe learns since when; a standby is not up
// but counts as alive; the stall of the slot shows in the oldest event's
// age only while the source is not up.
func TestSourceUpFollowsTheStream(t *testing.T) {
	m, reg, clk := newTestMetrics(t)
	fs := &streamingSource{}
	m.ExportSource(fs)
	m.WatchSlot(func(context.Context) time.Duration { return 40 * time.Second })
	m.Observer().SourceStarted()
	start := clk.now()

	for _, step := range []struct {
		name               string
		streaming, standby bool
		advance            time.Duration
		up                 float64
		downFor            time.Duration // 0: not down
		oldest             float64
	}{
		{"connecting", false, false, 3 * time.Second, 0, 3 * time.Second, 40},
		{"streaming", true, false, 5 * time.Second, 1, 0, 0},
		{"connection lost", false, false, 7 * time.Second, 0, 7 * time.Second, 40},
		// A standby behind a live holder sees the slot move (no stall);
		// behind its own dead session it does not, and events wait.
		{"waiting for the slot", false, true, 9 * time.Second, 0, 0, 40},
		{"streaming again", true, false, time.Second, 1, 0, 0},
	} {
		fs.set(step.streaming, step.standby)
		m.Progress() // a probe before the clock moves sees the new state
		clk.add(step.advance)
		if got := gauge(t, reg, "outboxrelay_source_up"); got != step.up {
			t.Errorf("%s: source_up %v, want %v", step.name, got, step.up)
		}
		if got := gauge(t, reg, "outboxrelay_oldest_unpublished_event_age_seconds"); got != step.oldest {
			t.Errorf("%s: oldest unpublished age %v, want %v", step.name, got, step.oldest)
		}
		p := m.Progress()
		var downFor time.Duration
		if !p.DownSince.IsZero() {
			downFor = clk.now().Sub(p.DownSince)
		}
		if downFor != step.downFor {
			t.Errorf("%s: down for %s, want %s (progress %+v, test started %s)", step.name, downFor, step.downFor, p, start)
		}
	}
	m.Observer().SourceStopped(nil)
}

// A slow event's time is split into the stages that held it: the CDC
// source knows when the walsender sent the transaction and when the relay
// read it, the poller only when it claimed the rows. Fast events are left
// out.
func TestSlowEventStages(t *testing.T) {
	m, reg, clk := newTestMetrics(t)
	fs := &fakeSink{}
	s := m.Sink(fs)
	ctx := context.Background()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	publish := func(commit time.Time, st connector.Stages) func(error) {
		t.Helper()
		if err := s.Publish(ctx, &connector.Message{Topic: "t", Timestamp: commit, Stages: st}, func(error) {}); err != nil {
			t.Fatal(err)
		}
		return fs.dones[len(fs.dones)-1]
	}
	t0 := clk.now()
	// Fast: 5ms in all.
	clk.add(ms(4))
	fast := publish(t0, connector.Stages{Sent: t0.Add(ms(1)), Received: t0.Add(ms(2))})
	clk.add(ms(1))
	fast(nil)
	// CDC, 50ms: postgres 2, network 3, relay 15 (published at 20), kafka 30.
	t1 := clk.now()
	clk.add(ms(20))
	cdc := publish(t1, connector.Stages{Sent: t1.Add(ms(2)), Received: t1.Add(ms(5))})
	clk.add(ms(30))
	cdc(nil)
	// The poller, 60ms: postgres 40 (claimed), relay 1, kafka 19.
	t2 := clk.now()
	clk.add(ms(41))
	poll := publish(t2, connector.Stages{Received: t2.Add(ms(40))})
	clk.add(ms(19))
	poll(nil)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "outboxrelay_slow_event_stage_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			h := mt.GetHistogram()
			got[mt.GetLabel()[0].GetValue()] = fmt.Sprintf("%d events, %.0fms", h.GetSampleCount(), h.GetSampleSum()*1000)
		}
	}
	want := map[string]string{
		StagePostgres: "2 events, 42ms",
		StageNetwork:  "1 events, 3ms",
		StageRelay:    "2 events, 16ms",
		StageKafka:    "2 events, 49ms",
	}
	for stage, w := range want {
		if got[stage] != w {
			t.Errorf("stage %s: %q, want %q", stage, got[stage], w)
		}
	}
}
