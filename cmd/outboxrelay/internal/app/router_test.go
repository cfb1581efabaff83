package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
)

// TestRouter: the router a command beside the relay gets routes as the
// relay's runner does: the routing section with its pattern, and a
// table's own routing.
func TestRouter(t *testing.T) {
	cfg, err := config.LoadTranslated([]byte(`
postgres: {url: "postgres://relay@db/app"}
kafka: {brokers: ["kafka:9092"]}
outbox:
  tables:
    - sales.outbox
    - name: billing.outbox
      routing: {topic_prefix: billing.}
routing: {topic_pattern: 'outbox\.event\.order|billing\..*'}
`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, nullKeys, err := Router(context.Background(), cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil || nullKeys {
		t.Fatalf("Router: %v, null keys %v", err, nullKeys)
	}
	for _, tc := range []struct {
		table, aggType string
		topic          string // "" for refused by the pattern
	}{
		{"sales.outbox", "order", "outbox.event.order"},
		{"billing.outbox", "invoice", "billing.invoice"},
		{"sales.outbox", "invoice", ""},
	} {
		e := connector.Event{ID: "1", AggregateType: tc.aggType, AggregateID: "a", Table: tc.table}
		m, err := rt.Route(context.Background(), &e)
		var tna *connector.TopicNotAllowedError
		switch {
		case tc.topic == "" && !errors.As(err, &tna):
			t.Errorf("%s %s: routed to %q (%v), want a refusal by routing.topic_pattern", tc.table, tc.aggType, m.Topic, err)
		case tc.topic != "" && (err != nil || m.Topic != tc.topic):
			t.Errorf("%s %s: routed to %q (%v), want %q", tc.table, tc.aggType, m.Topic, err, tc.topic)
		}
	}
}
