package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Sink returns s making a span for each message that carries a trace
// context (a valid traceparent header, from the routing's headers column
// or tracing column): a producer span, child of that context, from when
// the source read the event (or Publish, when the source cannot tell) to
// Kafka's acknowledgement, its error recorded. The record's traceparent
// and tracestate are then the span's, so that its consumer's span is the
// relay's child. A message without a trace context passes through as it
// is: a trace of the relay alone tells nothing the metrics do not, and
// it would be a root span for every event.
//
// A nil t returns s.
func (t *Tracing) Sink(s connector.Sink) connector.Sink {
	if t == nil {
		return s
	}
	return &sink{Sink: s, tracer: t.tracer}
}

type sink struct {
	connector.Sink // Flush and Abort pass straight through
	tracer         trace.Tracer
}

func (s *sink) Publish(ctx context.Context, m *connector.Message, done func(error)) error {
	parent := propagator.Extract(context.Background(), headers{&m.Headers})
	if !trace.SpanContextFromContext(parent).IsValid() {
		return s.Sink.Publish(ctx, m, done)
	}
	start := m.Stages.Received
	if start.IsZero() {
		start = time.Now()
	}
	_, span := s.tracer.Start(parent, "send "+m.Topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.String("messaging.message.id", m.EventID),
			attribute.String("messaging.kafka.message.key", string(m.Key)),
		))
	// The runner owns m.Headers and may reuse them: the record gets a
	// copy with the span's context in place of the writer's.
	hs := make([]connector.Header, len(m.Headers))
	copy(hs, m.Headers)
	orig := m.Headers
	m.Headers = hs
	propagator.Inject(trace.ContextWithSpan(context.Background(), span), headers{&m.Headers})
	err := s.Sink.Publish(ctx, m, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		done(err)
	})
	m.Headers = orig
	if err != nil {
		// Not sent, and done will not be called.
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
	}
	return err
}

// Transactions and Commit pass a transactional sink through
// ([connector.Transactional]).
func (s *sink) Transactions() bool {
	t, ok := s.Sink.(connector.Transactional)
	return ok && t.Transactions()
}

func (s *sink) Commit(ctx context.Context, mark *connector.Message) error {
	return s.Sink.(connector.Transactional).Commit(ctx, mark)
}

// headers is the propagation carrier over a message's headers: Set
// replaces the first header of the key, or adds one.
type headers struct{ hs *[]connector.Header }

func (h headers) Get(key string) string {
	for _, x := range *h.hs {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

func (h headers) Set(key, value string) {
	for i := range *h.hs {
		if (*h.hs)[i].Key == key {
			(*h.hs)[i].Value = []byte(value)
			return
		}
	}
	*h.hs = append(*h.hs, connector.Header{Key: key, Value: []byte(value)})
}

func (h headers) Keys() []string {
	keys := make([]string, len(*h.hs))
	for i, x := range *h.hs {
		keys[i] = x.Key
	}
	return keys
}
