package connector

import (
	"context"
	"strings"
	"testing"
	"time"
)

func benchEvent() *Event {
	return &Event{
		ID: "00000001-0000-4000-8000-000000000001", AggregateType: "order", AggregateID: "order-4711",
		Type: "OrderCreated", Payload: []byte(`{"id": 1, "note": "` + strings.Repeat("x", 470) + `"}`),
		CommitTime: time.Now(), Origin: "commit 0/16B3748",
	}
}

// BenchmarkRoute routes one event the Debezium way, as the runner does for
// every event.
func BenchmarkRoute(b *testing.B) {
	e := benchEvent()
	var rt Router = newCachedRouting(Routing{}.WithDefaults()) // the runner's default
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Route(b.Context(), e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTracker runs batches of 50 messages through the tracker, each
// acknowledged once, as a drain of 50-row transactions does.
func BenchmarkTracker(b *testing.B) {
	t := newTracker()
	done := func(error) {}
	const perBatch = 50
	b.ReportAllocs()
	for b.Loop() {
		p := t.add(done)
		for range perBatch {
			t.sent(p)
		}
		t.published(p, nil)
		for range perBatch {
			t.acked(p, nil)
		}
	}
}

// ackSink acknowledges every message at once.
type ackSink struct{}

func (ackSink) Publish(_ context.Context, _ *Message, done func(error)) error {
	done(nil)
	return nil
}
func (ackSink) Flush(context.Context) error { return nil }
func (ackSink) Abort(context.Context) error { return nil }

// BenchmarkPublish runs a batch of 50 events through the runner's publish
// step (route, track, hand to the sink) with a sink that costs nothing, so
// that what is measured is the runner's own work per event.
func BenchmarkPublish(b *testing.B) {
	r, err := NewRunner(nil, ackSink{}, RunnerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	t := newTracker()
	events := make([]Event, 50)
	for i := range events {
		events[i] = *benchEvent()
	}
	batch := Batch{Events: events, Done: func(error) {}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.publish(ctx, t, batch, r.newTxnState(t)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}

// BenchmarkNewEvent makes an event of an outbox row's columns, as the CDC
// source does for every row.
func BenchmarkNewEvent(b *testing.B) {
	e := benchEvent()
	cols := []Column{
		{Name: "id", Value: []byte(e.ID)}, {Name: "aggregatetype", Value: []byte(e.AggregateType)},
		{Name: "aggregateid", Value: []byte(e.AggregateID)}, {Name: "type", Value: []byte(e.Type)},
		{Name: "payload", Value: e.Payload},
	}
	m := ColumnMap{}.WithDefaults()
	b.ReportAllocs()
	for b.Loop() {
		if ev := m.NewEvent(cols, e.CommitTime, e.Origin); ev.Invalid != nil {
			b.Fatal(ev.Invalid)
		}
	}
}
