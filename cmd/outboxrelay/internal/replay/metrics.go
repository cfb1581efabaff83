package replay

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxrelay/outboxrelay/internal/metrics"
)

// Metrics count what a replay or a redrive did, for a scrape while the
// command runs (--metrics-listen). The commands are processes of their
// own, beside the relay, so these are not on the relay's /metrics; the
// last line of each command says the same counts.
type Metrics struct {
	chosen       prometheus.Gauge
	replayed     prometheus.Counter
	deadLettered prometheus.Counter
	redriven     prometheus.Counter
	stayed       prometheus.Counter
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		chosen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "replay_rows_chosen",
			Help: "Outbox rows the running replay chose to publish again."}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "replayed_total",
			Help: "Outbox rows published again by the replay, acknowledged by Kafka (committed, with exactly_once)."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "replay_dead_lettered_total",
			Help: "Rows the replay could not publish and sent to the dead letter topic."}),
		redriven: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "redriven_total",
			Help: "Dead-lettered events sent on to where today's routing puts them, acknowledged by Kafka."}),
		stayed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "redrive_stayed_total",
			Help: "Dead-lettered events a redrive could still not publish, which stay dead-lettered with the new reason."}),
	}
	for _, c := range []prometheus.Collector{m.chosen, m.replayed, m.deadLettered, m.redriven, m.stayed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// The methods take a nil *Metrics: no metrics kept.

func (m *Metrics) setChosen(n int64) {
	if m != nil {
		m.chosen.Set(float64(n))
	}
}

func (m *Metrics) addReplayed(n, deadLettered int64) {
	if m != nil {
		m.replayed.Add(float64(n))
		m.deadLettered.Add(float64(deadLettered))
	}
}

func (m *Metrics) addRedriven(went, stayed int64) {
	if m != nil {
		m.redriven.Add(float64(went))
		m.stayed.Add(float64(stayed))
	}
}
