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

// heldUpErr is an error that holds up topic, as the sink's are.
type heldUpErr struct{ topic string }

func (e heldUpErr) Error() string       { return "held up: " + e.topic }
func (e heldUpErr) HeldUpTopic() string { return e.topic }

// TestHeldUp: a run that fails on an error holding publishing up by the
// Kafka side is what Progress reports, from its first time on, through
// the restarts and the other failures between them, until Kafka
// acknowledges a record of its topic (any topic's for one holding up
// every topic); an acknowledgement of another topic does not end it.
func TestHeldUp(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(prometheus.NewRegistry(), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	hooks, snk := m.Observer(), m.Sink(ackSink{})
	ack := func(topic string) {
		t.Helper()
		if err := snk.Publish(context.Background(), &connector.Message{Topic: topic, EventID: "e"}, func(error) {}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step, topic string, since time.Time) {
		t.Helper()
		h := m.Progress().HeldUp
		switch {
		case topic == "-" && h != nil:
			t.Errorf("%s: held up %+v; want nothing held up", step, *h)
		case topic == "-":
		case h == nil:
			t.Errorf("%s: nothing held up; want topic %q since %s", step, topic, since)
		case h.Topic != topic || !h.Since.Equal(since) || !errors.As(h.Err, new(HeldUp)):
			t.Errorf("%s: held up %+v; want topic %q since %s, with its error", step, *h, topic, since)
		}
	}
	start := now
	check("at first", "-", time.Time{})
	hooks.RunFailed(fmt.Errorf("run: %w", heldUpErr{"orders"}), time.Second)
	check("refused", "orders", start)
	now = now.Add(15 * time.Second)
	hooks.RunFailed(errors.New("connection reset by peer"), time.Second)
	hooks.RunFailed(heldUpErr{"orders"}, time.Second)
	check("refused again", "orders", start)
	ack("invoices")
	check("another topic acknowledged", "orders", start)
	ack("orders")
	check("its topic acknowledged", "-", time.Time{})

	hooks.RunFailed(heldUpErr{""}, time.Second)
	check("every topic", "", now)
	ack("invoices")
	check("any topic acknowledged", "-", time.Time{})
}
