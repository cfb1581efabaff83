package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Topics are input: past the bound, every further topic is counted under
// one label, and nothing is lost from the counts. The dead letter topic
// keeps a label of its own however many topics came before it.
func TestTopicSeriesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max       int // WithMaxTopics
		topics    int
		wantOwn   int // topics with a series of their own
		wantOther float64
	}{
		{name: "under the bound", max: 5, topics: 4, wantOwn: 4},
		{name: "at the bound", max: 5, topics: 5, wantOwn: 5},
		{name: "past the bound", max: 5, topics: 12, wantOwn: 5, wantOther: 7},
		{name: "default bound", topics: DefaultMaxTopics + 50, wantOwn: DefaultMaxTopics, wantOther: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(reg, WithMaxTopics(tc.max), WithDeadLetterTopic("dead.letters"))
			if err != nil {
				t.Fatal(err)
			}
			fs := &fakeSink{}
			s := m.Sink(fs)
			ctx := context.Background()
			topic := func(i int) string { return fmt.Sprintf("outbox.event.t%03d", i) }
			// Each topic twice, so a topic that was given a label keeps it.
			for range 2 {
				for i := range tc.topics {
					if err := s.Publish(ctx, &connector.Message{Topic: topic(i)}, func(error) {}); err != nil {
						t.Fatal(err)
					}
				}
			}
			dl := &connector.Message{Topic: "dead.letters", Headers: []connector.Header{{Key: connector.HeaderError, Value: []byte("bad")}}}
			if err := s.Publish(ctx, dl, func(error) {}); err != nil {
				t.Fatal(err)
			}
			// The first acknowledgement of each topic fails, the second
			// succeeds; the hook counts bytes for each.
			for i, done := range fs.dones {
				if i < tc.topics {
					done(errors.New("broker gone"))
				} else {
					done(nil)
				}
			}
			for i := range tc.topics {
				m.kafka.OnProduceBatchWritten(kgo.BrokerMetadata{NodeID: 1}, topic(i), 0, kgo.ProduceBatchMetrics{UncompressedBytes: 10})
			}

			for name, vec := range map[string]*prometheus.CounterVec{"published": m.published, "errors": m.publishErrors} {
				wantSeries := tc.wantOwn
				if tc.wantOther > 0 {
					wantSeries++
				}
				if name == "published" {
					wantSeries++ // the dead letter topic
				}
				if got := testutil.CollectAndCount(vec); got != wantSeries {
					t.Errorf("%s has %d series, want %d", name, got, wantSeries)
				}
				for i := range tc.wantOwn {
					if got := testutil.ToFloat64(vec.WithLabelValues(topic(i))); got != 1 {
						t.Errorf("%s{topic=%q} = %v, want 1", name, topic(i), got)
					}
				}
			}
			if tc.wantOther > 0 {
				if got := testutil.ToFloat64(m.published.WithLabelValues(OtherTopics)); got != tc.wantOther {
					t.Errorf("published{topic=%q} = %v, want %v", OtherTopics, got, tc.wantOther)
				}
				if got := testutil.ToFloat64(m.publishErrors.WithLabelValues(OtherTopics)); got != tc.wantOther {
					t.Errorf("errors{topic=%q} = %v, want %v", OtherTopics, got, tc.wantOther)
				}
				if got := testutil.ToFloat64(m.kafka.produced.WithLabelValues("1", OtherTopics)); got != 10*tc.wantOther {
					t.Errorf("produce bytes{topic=%q} = %v, want %v", OtherTopics, got, 10*tc.wantOther)
				}
			}
			if got := testutil.ToFloat64(m.published.WithLabelValues("dead.letters")); got != 1 {
				t.Errorf("published{topic=dead.letters} = %v, want 1: the dead letter topic has a series of its own past the bound", got)
			}
			wantBytes := tc.wantOwn
			if tc.wantOther > 0 {
				wantBytes++
			}
			if got := testutil.CollectAndCount(m.kafka.produced); got != wantBytes {
				t.Errorf("produce bytes has %d series, want %d", got, wantBytes)
			}
			if got := len(s.(*sink).topics); got > tc.wantOwn+1 {
				t.Errorf("the sink keeps counters for %d topics, want at most %d", got, tc.wantOwn+1)
			}
		})
	}
}
