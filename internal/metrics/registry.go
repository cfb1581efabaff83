package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SchemaRegistry follows the Schema Registry that format avro registers
// its schemas in, from what the router reports after each request
// (Observe): whether it answered, for outboxrelay_schema_registry_up and
// the readiness probe, and how many requests got no answer.
type SchemaRegistry struct {
	up     prometheus.Gauge
	errors prometheus.Counter

	mu    sync.Mutex
	err   error // the last request's failure; nil once one is answered
	since time.Time
}

// NewSchemaRegistry registers the registry's metrics on reg. The registry
// counts as up until a request fails.
func NewSchemaRegistry(reg prometheus.Registerer) (*SchemaRegistry, error) {
	s := &SchemaRegistry{
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "schema_registry_up",
			Help: "1 when the Schema Registry answered the last request (format avro); 0 while publishing waits for it.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "schema_registry_errors_total",
			Help: "Requests to the Schema Registry that got no answer (unreachable, timed out, 5xx) and are tried again.",
		}),
	}
	s.up.Set(1)
	for _, c := range []prometheus.Collector{s.up, s.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return s, nil
}

// Observe records the outcome of one request: nil when the registry
// answered (a refusal is an answer), else why it did not. It does not
// block.
func (s *SchemaRegistry) Observe(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.up.Set(1)
		s.err = nil
		return
	}
	s.up.Set(0)
	s.errors.Inc()
	if s.err == nil {
		s.since = time.Now()
	}
	s.err = err
}

// Check is the readiness check: an error while the registry does not
// answer, since nothing whose schema is not yet registered is published.
func (s *SchemaRegistry) Check(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return nil
	}
	return fmt.Errorf("the schema registry has not answered for %s, and records wait for their schemas: %w", time.Since(s.since).Round(time.Second), s.err)
}
