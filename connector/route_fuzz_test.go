package connector

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"testing"
	"time"
)

// FuzzRoute routes rows of any content, with any routing, and checks what
// routing promises: a message only to a legal topic inside
// routing.topic_pattern, with the row's key, value and headers unchanged;
// otherwise an error of that event; the runner's cached router the same
// as Routing itself, whatever came before; and no panic. Seeds are in
// testdata/fuzz/FuzzRoute.
func FuzzRoute(f *testing.F) {
	f.Add("2f0a1c8e", "order", "1001", "OrderCreated", false, []byte(`{"a":1}`), "", "", "", "")
	f.Add("id", "customer", "", "", true, []byte(nil), "app.", "", "eventType", `app\.(order|customer)`)
	f.Add("id", "bad type", "k", "t", false, []byte("x"), "", "", "", "")
	f.Add("id", "..", "k", "t", false, []byte("x"), "", "", "", "")
	f.Add("id", "x", "k", "t", false, []byte("x"), "", "all-events", "type", "other")
	f.Add("", "é", "\x00", "\xff", false, []byte{0}, ".", "", "", "(")
	f.Fuzz(func(t *testing.T, id, aggType, aggID, typ string, typeNull bool, payload []byte, prefix, topic, typeHeader, pattern string) {
		r := Routing{TopicPrefix: prefix, Topic: topic, TypeHeader: typeHeader, TopicPattern: pattern}.WithDefaults()
		if r.Validate() != nil {
			return // refused at start; never routes
		}
		e := &Event{ID: id, AggregateType: aggType, AggregateID: aggID, Type: typ, TypeNull: typeNull,
			Payload: payload, CommitTime: time.Unix(1, 2), Origin: "public.outbox"}
		m, err := r.Route(t.Context(), e)
		// The cached router, warmed with the same aggregate type and
		// another, routes the same.
		c := NewRouting(r)
		_, _ = c.Route(t.Context(), &Event{ID: "other", AggregateType: aggType + "x"})
		for range 2 {
			cm, cerr := c.Route(t.Context(), e)
			if !reflect.DeepEqual(cm, m) || (cerr == nil) != (err == nil) {
				t.Fatalf("NewRouting routes %+v to %+v, %v; Routing to %+v, %v", e, cm, cerr, m, err)
			}
		}
		if err != nil {
			var ee *EventError
			if !errors.As(err, &ee) || ee.EventID != id || ee.Origin != e.Origin {
				t.Fatalf("error %v is not an EventError of event %q", err, id)
			}
			return
		}
		if verr := ValidTopic(m.Topic); verr != nil {
			t.Fatalf("routed to an illegal topic: %v", verr)
		}
		if pattern != "" && !regexp.MustCompile(`^(?:`+pattern+`)$`).MatchString(m.Topic) {
			t.Fatalf("routed to %q, outside the pattern %q", m.Topic, pattern)
		}
		want := topic
		if want == "" {
			want = r.TopicPrefix + aggType
		}
		if m.Topic != want {
			t.Fatalf("topic %q, want %q", m.Topic, want)
		}
		if !bytes.Equal(m.Key, []byte(aggID)) || !bytes.Equal(m.Value, payload) || m.EventID != id || !m.Timestamp.Equal(e.CommitTime) {
			t.Fatalf("message %+v does not carry the row %+v as it is", m, e)
		}
		if len(m.Headers) == 0 || m.Headers[0].Key != "id" || string(m.Headers[0].Value) != id {
			t.Fatalf("headers %+v do not start with the id %q", m.Headers, id)
		}
		if typeHeader != "" {
			h := m.Headers[1]
			if len(m.Headers) != 2 || h.Key != typeHeader || (typeNull != (h.Value == nil)) || (!typeNull && string(h.Value) != typ) {
				t.Fatalf("headers %+v: want the type %q (null %v) under %q", m.Headers, typ, typeNull, typeHeader)
			}
		} else if len(m.Headers) != 1 {
			t.Fatalf("headers %+v: want only the id", m.Headers)
		}
	})
}
