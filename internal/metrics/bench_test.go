package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

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

// BenchmarkProduceBatchWritten is the hook franz-go calls for every
// partition batch of a produce request: kprom's and the relay's.
func BenchmarkProduceBatchWritten(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	stock := kprom.NewMetrics(Namespace, kprom.Registerer(prometheus.NewRegistry()))
	for _, c := range []struct {
		name string
		hook kgo.HookProduceBatchWritten
	}{{"kprom", stock}, {"relay", m.kafka}} {
		b.Run(c.name, func(b *testing.B) {
			// kprom makes its metrics when the client is made.
			cl, err := kgo.NewClient(kgo.WithHooks(c.hook))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			meta := kgo.BrokerMetadata{NodeID: 1}
			b.ReportAllocs()
			for b.Loop() {
				c.hook.OnProduceBatchWritten(meta, "outbox.event.order", 3, kgo.ProduceBatchMetrics{NumRecords: 1, UncompressedBytes: 600})
			}
		})
	}
}
