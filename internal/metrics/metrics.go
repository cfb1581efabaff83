package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Namespace starts the name of every metric of the relay.
const Namespace = "outboxrelay"

// Metrics are the relay's Prometheus metrics, and the observations the
// health probes judge it by. Its methods may be called concurrently.
type Metrics struct {
	now     func() time.Time
	version string

	published     *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	latency       prometheus.Histogram
	stages        *prometheus.HistogramVec
	slow          stageObservers
	batchEvents   prometheus.Histogram
	deadLettered  prometheus.Counter
	restarts      prometheus.Counter
	kafka         *kafkaHooks
	topics        *topicLabels

	mu sync.Mutex
	// inflight holds a flight for every message handed to the sink and
	// not yet acknowledged, in the order they were handed over, which is
	// commit order: its front is the oldest event not yet in Kafka. It is
	// as long as the sink's buffer, which the sink bounds.
	inflight flights
	// waitingSince is when the runner took the batch it has not yet
	// handed to the sink in full; zero when it holds none.
	waitingSince time.Time
	// running: the source's Run is executing; runs counts its calls, and
	// lastErr is what the last one returned.
	running bool
	runs    int
	lastErr error
	stats   sourceStats
	// lastUp is when the source was last seen up (or a standby); the
	// relay's start before it ever was.
	lastUp time.Time
	// slot, when set, measures from PostgreSQL how long the replication
	// slot has stood still while holding WAL back.
	slot func(context.Context) time.Duration
	// status is what the status page shows beside the metrics.
	status statusState
	// deadLetterTopic is kafka.dead_letter_topic: its records stand for
	// events, but are not the last event read or acknowledged.
	deadLetterTopic string
	// heldUp is publishing held up by the Kafka side (HeldUp); nil when
	// it is not.
	heldUp *HeldUpSince
}

// Option wires Metrics to its surroundings.
type Option func(*Metrics)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(m *Metrics) { m.now = now } }

// WithBuildInfo exports outboxrelay_build_info{version} = 1.
func WithBuildInfo(version string) Option {
	return func(m *Metrics) { m.version = version }
}

// latencyBuckets span a healthy relay (milliseconds) to one that has been
// down for minutes and is catching up.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// stageBuckets span a stage of a slow event, from a millisecond to the
// seconds of a relay catching up.
var stageBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// New registers the relay's metrics on reg, with Go runtime and process
// metrics, and returns them.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	m := &Metrics{
		now:    time.Now,
		topics: newTopicLabels(),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "events_published_total",
			Help: "Events Kafka has acknowledged, by topic (the dead letter topic included; past metrics.max_topics topics, the others under topic=\"(other)\").",
		}, []string{"topic"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "publish_errors_total",
			Help: "Events whose publication failed, by topic (as outboxrelay_events_published_total): refused as unpublishable, or failed and to be retried from the last checkpoint.",
		}, []string{"topic"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "event_latency_seconds",
			Help:    "Time from an event's record timestamp (by default its commit in PostgreSQL) to Kafka's acknowledgement of it.",
			Buckets: latencyBuckets,
		}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "slow_event_stage_seconds",
			Help:    "For each event 10ms or more from its commit to Kafka's acknowledgement, how long each stage held it: postgres (commit to the server sending it; the poller: to its claim), network (sent to read by the relay; CDC), relay (read to handed to the producer), kafka (the producer's batching and the broker).",
			Buckets: stageBuckets,
		}, []string{"stage"}),
		batchEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "batch_events",
			Help:    "Events per batch read from the source.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "dead_lettered_events_total",
			Help: "Events that could never be published to their topic and went to the dead letter topic instead.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "source_restarts_total",
			Help: "Times the relay restarted its source from the last checkpoint, after a lost connection or a failed produce.",
		}),
	}
	m.slow = newStageObservers(m.stages)
	m.status.deadLetters = newRing[DeadLetterSeen](RecentDeadLetters)
	m.status.rate = newRing[RateSample](RateSamples)
	for _, o := range opts {
		o(m)
	}
	m.lastUp = m.now()
	kafka, err := newKafkaHooks(reg, m.topics)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	m.kafka = kafka
	cs := []prometheus.Collector{
		m.published, m.publishErrors, m.latency, m.stages, m.batchEvents, m.deadLettered, m.restarts,
		relayCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if m.version != "" {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help:        "Always 1; the version label says which outboxrelay runs.",
			ConstLabels: prometheus.Labels{"version": m.version},
		}, func() float64 { return 1 }))
	}
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return m, nil
}

// WatchSlot makes the oldest unpublished event's age account for a
// replication slot that stands still while the source is down: stalled
// says how long it has (PostgresProbe.SlotStalled).
func (m *Metrics) WatchSlot(stalled func(context.Context) time.Duration) {
	m.mu.Lock()
	m.slot = stalled
	m.mu.Unlock()
}

// KafkaHooks are the franz-go hooks that export the Kafka client's own
// metrics (outboxrelay_kafka_*: connections, bytes, buffered records):
// kprom's, with bytes produced counted by a cheaper hook of the relay's
// (kafka.go). Give them to one client with kgo.WithHooks.
func (m *Metrics) KafkaHooks() kgo.Hook { return m.kafka }

// Progress is what the health probes judge the relay by.
type Progress struct {
	// InFlight counts messages handed to the sink and not yet
	// acknowledged.
	InFlight int
	// OldestSent is when the oldest of them was handed over; zero when
	// none is in flight.
	OldestSent time.Time
	// WaitingSince is when the runner took the batch read from the source
	// that it has not yet handed to the sink in full (routing it, or
	// waiting for room in the producer's buffer); zero when it holds none.
	WaitingSince time.Time
	// SourceRunning reports whether the source's Run is executing, as
	// opposed to waiting to be restarted. SourceErr is how its last run
	// ended.
	SourceRunning bool
	SourceErr     error
	// SourceUp is SourceRunning and, for a source that can tell, connected
	// (for CDC: the replication stream is open). SourceStandby: it waits
	// for another session to let go of the replication slot.
	SourceUp, SourceStandby bool
	// DownSince is when the source was last up or a standby (the relay's
	// start if it never was); zero while it is.
	DownSince time.Time
	// HeldUp is publishing held up by the Kafka side ([HeldUp]), until
	// someone acts there; nil when it is not.
	HeldUp *HeldUpSince
}

// Progress returns the relay's progress as of now.
func (m *Metrics) Progress() Progress {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := Progress{
		InFlight:      m.inflight.n,
		WaitingSince:  m.waitingSince,
		SourceRunning: m.running,
		SourceErr:     m.lastErr,
		HeldUp:        m.heldUp,
	}
	m.observeLocked()
	p.SourceUp, p.SourceStandby = m.upLocked()
	if !p.SourceUp && !p.SourceStandby {
		p.DownSince = m.lastUp
	}
	if f := m.inflight.head; f != nil {
		p.OldestSent = f.sent
	}
	return p
}

// Stalled is how long the relay has had work in hand without getting
// any further with it: the age of the oldest unacknowledged message, or of
// the batch the runner has not handed to the sink, whichever is older.
// Zero when it has nothing in hand.
func (p Progress) Stalled(now time.Time) time.Duration {
	var d time.Duration
	if !p.OldestSent.IsZero() {
		d = now.Sub(p.OldestSent)
	}
	if !p.WaitingSince.IsZero() {
		d = max(d, now.Sub(p.WaitingSince))
	}
	return max(d, 0)
}

// oldestCommit is the commit time of the oldest event in flight, or zero.
func (m *Metrics) oldestCommit() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.inflight.head; f != nil {
		return f.commit
	}
	return time.Time{}
}
