package connector

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestCachedRoutingMatchesRouting checks the runner's default router
// against Routing itself, for more aggregate types than it caches, with and
// without a type header, and for aggregate types that are no legal topic.
func TestCachedRoutingMatchesRouting(t *testing.T) {
	for _, r := range []Routing{
		{},
		{TypeHeader: "eventType"},
		{TopicPrefix: "app."},
		{Topic: "all-events"},
		{TopicPattern: `outbox\.event\.(order|type1.*)`},
		{Topic: "all-events", TopicPattern: "other"},
	} {
		r := r.WithDefaults()
		c := newCachedRouting(r)
		for i := range maxCachedTopics + 10 {
			for _, aggType := range []string{fmt.Sprintf("type%d", i), "order", "bad type"} {
				e := &Event{ID: fmt.Sprintf("id-%d", i), AggregateType: aggType, AggregateID: fmt.Sprintf("agg-%d", i%7),
					Type: "Happened", Payload: []byte("{}"), CommitTime: time.Unix(int64(i), 0), Origin: "here"}
				want, wantErr := r.Route(t.Context(), e)
				got, err := c.Route(t.Context(), e)
				if !reflect.DeepEqual(got, want) || (err == nil) != (wantErr == nil) {
					t.Fatalf("%+v: event %+v: cached routing gives %+v, %v; Routing gives %+v, %v", r, e, got, err, want, wantErr)
				}
				var ee *EventError
				if err != nil && (!errors.As(err, &ee) || ee.EventID != e.ID) {
					t.Fatalf("error %v does not name event %s", err, e.ID)
				}
			}
		}
		if len(c.topics) > maxCachedTopics {
			t.Errorf("%d topics cached, more than %d", len(c.topics), maxCachedTopics)
		}
	}
}

// TestRouteSlicesAreSeparate checks that the key and the header values,
// which share one allocation, cannot overwrite each other.
func TestRouteSlicesAreSeparate(t *testing.T) {
	e := &Event{ID: "id-1", AggregateType: "order", AggregateID: "agg-1", Type: "Created"}
	m, err := Routing{TypeHeader: "type"}.WithDefaults().Route(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(m.Key, "XXXX"...)
	_ = append(m.Headers[0].Value, "YYYY"...)
	if string(m.Key) != "agg-1" || string(m.Headers[0].Value) != "id-1" || string(m.Headers[1].Value) != "Created" {
		t.Errorf("after appends: key %q, id %q, type %q", m.Key, m.Headers[0].Value, m.Headers[1].Value)
	}
}
