package sink_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestRecordSizeIsMessageSize: the runner cuts a dead letter record to the
// limit the sink named by connector's Message.Size, so the two must agree
// to the byte, or a record cut to fit would be refused again.
func TestRecordSizeIsMessageSize(t *testing.T) {
	tests := []struct {
		name string
		m    connector.Message
	}{
		{"empty", connector.Message{}},
		{"key and value", connector.Message{Key: []byte("a"), Value: []byte(`{"seq": 1}`)}},
		{"empty but not nil", connector.Message{Key: []byte{}, Value: []byte{}}},
		{"headers", connector.Message{Key: []byte("k"), Headers: []connector.Header{{Key: "id", Value: []byte("e1")}, {Key: "nil"}}}},
		{"varint boundaries", connector.Message{Key: make([]byte, 63), Value: make([]byte, 8191), Headers: []connector.Header{{Key: strings.Repeat("h", 64), Value: make([]byte, 1<<20)}}}},
		{"large", connector.Message{Key: make([]byte, 2<<20), Value: make([]byte, 3<<20)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &kgo.Record{Key: tc.m.Key, Value: tc.m.Value}
			for _, h := range tc.m.Headers {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			if got, want := tc.m.Size(), sink.RecordSize(rec); got != want {
				t.Errorf("Message.Size() = %d, sink.RecordSize = %d", got, want)
			}
		})
	}
}
