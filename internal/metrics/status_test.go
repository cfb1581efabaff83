package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxrelay/outboxrelay/connector"
)

// TestStatus: what the status page shows is kept as the runner and the
// sink report it: the last event handed over and the last acknowledged
// (dead letter records apart), the acknowledged count, the last dead
// letters (bounded, newest first), the last failure, the restarts, and a
// bounded series of rates.
func TestStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	m, err := New(prometheus.NewRegistry(), WithClock(clock), WithDeadLetterTopic("dlq"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if s := m.Status(ctx); s.LastRead != nil || s.LastAcknowledged != nil || s.LastFailure != nil || len(s.DeadLetters) != 0 || len(s.Rate) != 0 {
		t.Fatalf("a new relay's status: %+v; want nothing seen", s)
	}
	obs := m.Observer()
	obs.SourceStarted()
	commit := now.Add(-time.Second)
	snk := m.Sink(ackSink{})
	held := m.Sink(holdSink{})
	publish := func(s connector.Sink, id, topic string) {
		t.Helper()
		if err := s.Publish(ctx, &connector.Message{EventID: id, Topic: topic, Timestamp: commit}, func(error) {}); err != nil {
			t.Fatal(err)
		}
	}
	publish(snk, "e1", "outbox.event.order")
	publish(snk, "dl1", "dlq") // the dead letter record of another event
	now = now.Add(time.Second)
	publish(held, "e2", "outbox.event.invoice") // handed over, not acknowledged

	s := m.Status(ctx)
	if want := (Seen{EventID: "e2", Topic: "outbox.event.invoice", Timestamp: commit, At: now}); s.LastRead == nil || *s.LastRead != want {
		t.Errorf("last read = %+v, want %+v", s.LastRead, want)
	}
	if want := (Seen{EventID: "e1", Topic: "outbox.event.order", Timestamp: commit, At: now.Add(-time.Second)}); s.LastAcknowledged == nil || *s.LastAcknowledged != want {
		t.Errorf("last acknowledged = %+v, want %+v", s.LastAcknowledged, want)
	}
	if s.Acknowledged != 2 || s.InFlight != 1 || !s.Oldest.Equal(commit) {
		t.Errorf("acknowledged %d, in flight %d, oldest %v; want 2, 1 and %v", s.Acknowledged, s.InFlight, s.Oldest, commit)
	}

	for i := range RecentDeadLetters + 5 {
		obs.DeadLettered(connector.DeadLetter{EventID: fmt.Sprintf("bad%d", i), Topic: "outbox.event.order", Reason: "too large"})
	}
	lost := errors.New("connection reset by peer")
	obs.SourceStopped(lost)
	obs.RunFailed(lost, time.Second)
	obs.SourceStarted()
	s = m.Status(ctx)
	if len(s.DeadLetters) != RecentDeadLetters || s.DeadLetters[0].EventID != fmt.Sprintf("bad%d", RecentDeadLetters+4) || s.DeadLetters[RecentDeadLetters-1].EventID != "bad5" {
		t.Errorf("dead letters %+v; want the last %d, newest first", s.DeadLetters, RecentDeadLetters)
	}
	if s.DeadLettered != RecentDeadLetters+5 || s.DeadLetters[0].Reason != "too large" || !s.DeadLetters[0].At.Equal(now) {
		t.Errorf("dead lettered %d, newest %+v", s.DeadLettered, s.DeadLetters[0])
	}
	if s.LastFailure == nil || !errors.Is(s.LastFailure.Err, lost) || s.Restarts != 1 || !s.SourceRunning {
		t.Errorf("last failure %+v, restarts %d, running %v; want the lost connection, 1, running", s.LastFailure, s.Restarts, s.SourceRunning)
	}

	// A sample every RateInterval, of the records acknowledged in it; at
	// most RateSamples.
	m.mu.Lock()
	m.sampleRateLocked(now)
	m.mu.Unlock()
	for i := range RateSamples + 3 {
		for range i % 4 {
			publish(snk, "e", "outbox.event.order")
		}
		now = now.Add(RateInterval)
		m.mu.Lock()
		m.sampleRateLocked(now)
		m.mu.Unlock()
	}
	s = m.Status(ctx)
	if len(s.Rate) != RateSamples {
		t.Fatalf("%d rate samples, want %d", len(s.Rate), RateSamples)
	}
	last := s.Rate[len(s.Rate)-1]
	if want := float64((RateSamples+2)%4) / RateInterval.Seconds(); !last.At.Equal(now) || last.PerSecond != want {
		t.Errorf("newest rate sample %+v, want %v/s at %v", last, want, now)
	}
	if !s.Rate[0].At.Equal(now.Add(-(RateSamples - 1) * RateInterval)) {
		t.Errorf("oldest rate sample at %v, want the one %d intervals back", s.Rate[0].At, RateSamples-1)
	}
}

// holdSink takes messages and never acknowledges them.
type holdSink struct{ ackSink }

func (holdSink) Publish(context.Context, *connector.Message, func(error)) error { return nil }
