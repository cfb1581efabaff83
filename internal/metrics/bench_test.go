package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxrelay/outboxrelay/connector"
)

// ackSink acknowledges every message at once.
type ackSink struct{}

func (ackSink) Publish(_ context.Context, _ *connector.Message, done func(error)) error {
	done(nil)
	return nil
}
func (ackSink) Flush(context.Context) error { return nil }
func (ackSink) Abort(context.Context) error { return nil }

// BenchmarkSinkPublish is what the sink decorator adds to every event: it
// joins and leaves the in-flight set and is counted and timed.
func BenchmarkSinkPublish(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	s := m.Sink(ackSink{})
	ctx := context.Background()
	msg := &connector.Message{Topic: "outbox.event.order", Timestamp: time.Now(), Headers: []connector.Header{{Key: "id", Value: []byte("1")}}}
	done := func(error) {}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Publish(ctx, msg, done); err != nil {
			b.Fatal(err)
		}
	}
}
