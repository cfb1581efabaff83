package cdc

import (
	"bytes"
	"testing"

	"github.com/outboxrelay/outboxrelay/connector"
)

// TestEventBytes: what a batch counts against cdc.max_batch_bytes is every
// value an event keeps. Extra columns once went uncounted, so that events
// with a large one filled a batch far past the bound.
func TestEventBytes(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	for _, tc := range []struct {
		name string
		e    connector.Event
		min  int
	}{
		{"payload", connector.Event{ID: "1", AggregateType: "order", AggregateID: "a", Type: "Created", Payload: big}, 1<<20 + 14},
		{"extra column", connector.Event{ID: "1", AggregateID: "a", Payload: []byte("{}"),
			Extra: []connector.Column{{Name: "trace", Value: big}}}, 1<<20 + 9},
		{"routing fields", connector.Event{ID: string(big), AggregateType: string(big), AggregateID: "a"}, 2 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventBytes(&tc.e); got < tc.min || got > tc.min+256 {
				t.Errorf("eventBytes = %d, want %d and the event's fixed part", got, tc.min)
			}
		})
	}
}
