package sink

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
)

// instantProducer completes every record at once, without a broker.
type instantProducer struct{}

func (instantProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, nil)
}
func (instantProducer) Flush(context.Context) error                { return nil }
func (instantProducer) AbortBufferedRecords(context.Context) error { return nil }
func (instantProducer) Close()                                     {}

// BenchmarkPublish is the sink's own work per message: the record, its
// size check and its promise, with a producer that costs nothing.
func BenchmarkPublish(b *testing.B) {
	s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, MaxRecordBytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// The real client goes back before Close, which ends its goroutines.
	real := s.p
	s.p = instantProducer{}
	defer func() { s.p = real }()
	m := &connector.Message{
		Topic: "outbox.event.order", Key: []byte("order-4711"), Value: []byte(strings.Repeat("x", 500)),
		Headers:   []connector.Header{{Key: "id", Value: []byte("00000001-0000-4000-8000-000000000001")}},
		Timestamp: time.Now(), EventID: "00000001-0000-4000-8000-000000000001",
	}
	ctx := context.Background()
	done := func(error) {}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Publish(ctx, m, done); err != nil {
			b.Fatal(err)
		}
	}
}
