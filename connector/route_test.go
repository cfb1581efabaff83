package connector

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

func TestRouteDebeziumDefaults(t *testing.T) {
	commit := time.Date(2026, 11, 22, 10, 0, 0, 123000000, time.UTC)
	e := Event{ID: "2f0a1c8e-0c1d-4a9b-9c55-3f4c1b0e7a11", AggregateType: "order", AggregateID: "1001", Type: "OrderCreated", Payload: []byte(`{"a": 1}`), CommitTime: commit}
	for _, tc := range []struct {
		name     string
		typeNull bool
		r        Routing
		topic    string
		headers  []Header
	}{
		{name: "defaults", r: Routing{}.WithDefaults(), topic: "outbox.event.order", headers: []Header{{"id", []byte(e.ID)}}},
		{name: "prefix", r: Routing{TopicPrefix: "events."}.WithDefaults(), topic: "events.order", headers: []Header{{"id", []byte(e.ID)}}},
		{name: "one topic", r: Routing{Topic: "all-events"}.WithDefaults(), topic: "all-events", headers: []Header{{"id", []byte(e.ID)}}},
		{name: "type header", r: Routing{TypeHeader: "eventType"}.WithDefaults(), topic: "outbox.event.order", headers: []Header{{"id", []byte(e.ID)}, {"eventType", []byte("OrderCreated")}}},
		{name: "type header of a NULL type", typeNull: true, r: Routing{TypeHeader: "eventType"}.WithDefaults(), topic: "outbox.event.order", headers: []Header{{"id", []byte(e.ID)}, {"eventType", nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e
			if tc.typeNull {
				e.Type, e.TypeNull = "", true
			}
			m, err := tc.r.Route(t.Context(), &e)
			if err != nil {
				t.Fatal(err)
			}
			if m.Topic != tc.topic || string(m.Key) != "1001" || string(m.Value) != `{"a": 1}` || !m.Timestamp.Equal(commit) || m.EventID != e.ID {
				t.Fatalf("got %+v", m)
			}
			if len(m.Headers) != len(tc.headers) {
				t.Fatalf("headers %v, want %v", m.Headers, tc.headers)
			}
			for i, h := range tc.headers {
				if m.Headers[i].Key != h.Key || string(m.Headers[i].Value) != string(h.Value) || (m.Headers[i].Value == nil) != (h.Value == nil) {
					t.Fatalf("headers %v, want %v", m.Headers, tc.headers)
				}
			}
		})
	}
}

func TestRouteRejectsIllegalTopics(t *testing.T) {
	r := Routing{}.WithDefaults()
	for _, aggType := range []string{"order lines", "ünicode", "a/b", strings.Repeat("x", 240)} {
		e := Event{ID: "id-1", AggregateType: aggType, AggregateID: "k"}
		_, err := r.Route(t.Context(), &e)
		var ee *EventError
		if !errors.As(err, &ee) || ee.EventID != "id-1" {
			t.Errorf("aggregate type %q: err %v, want an EventError naming id-1", aggType, err)
		}
	}
	// A name from a row can be megabytes: the error quotes a bounded part.
	for _, aggType := range []string{strings.Repeat("x", 2<<20), strings.Repeat("y", 2<<20) + " z"} {
		_, err := r.Route(t.Context(), &Event{ID: "id-2", AggregateType: aggType, AggregateID: "k"})
		if err == nil || len(err.Error()) > 1024 {
			t.Errorf("a %d-byte aggregate type: error of %d bytes, want one under 1 KiB", len(aggType), len(fmt.Sprint(err)))
		}
	}
}

// Any aggregate type of legal characters routes to prefix+type, keyed by the
// aggregate id, with the payload untouched.
func TestRouteProperty(t *testing.T) {
	r := Routing{}.WithDefaults()
	legal := func(s string) string {
		return strings.Map(func(c rune) rune {
			if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
				return c
			}
			return -1
		}, s)
	}
	f := func(aggType, aggID string, payload []byte) bool {
		aggType = legal(aggType)
		if aggType == "" || len(aggType) > 200 {
			return true
		}
		e := Event{ID: "x", AggregateType: aggType, AggregateID: aggID, Payload: payload}
		m, err := r.Route(t.Context(), &e)
		return err == nil && m.Topic == "outbox.event."+aggType && string(m.Key) == aggID && string(m.Value) == string(payload)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

func TestNewEvent(t *testing.T) {
	m := ColumnMap{}.WithDefaults()
	commit := time.Unix(1700000000, 0)
	col := func(name, v string) Column { return Column{Name: name, Value: []byte(v)} }
	null := func(name string) Column { return Column{Name: name, Null: true} }
	for _, tc := range []struct {
		name    string
		cols    []Column
		invalid string
	}{
		{name: "complete", cols: []Column{col("id", "1"), col("aggregatetype", "order"), col("aggregateid", "a"), col("type", "T"), col("payload", "{}"), col("tenant", "t1")}},
		{name: "null payload", cols: []Column{col("id", "1"), col("aggregatetype", "order"), col("aggregateid", "a"), null("payload")}},
		{name: "null id", cols: []Column{null("id"), col("aggregatetype", "order"), col("aggregateid", "a")}, invalid: `"id" is missing or NULL`},
		{name: "null aggregateid", cols: []Column{col("id", "7"), col("aggregatetype", "order"), null("aggregateid")}, invalid: `outbox event 7 (here): column "aggregateid" is missing or NULL`},
		{name: "no aggregatetype", cols: []Column{col("id", "7"), col("aggregateid", "a")}, invalid: `"aggregatetype" is missing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := m.NewEvent(tc.cols, commit, "here")
			if tc.invalid == "" {
				if e.Invalid != nil {
					t.Fatalf("invalid: %v", e.Invalid)
				}
				if e.ID != "1" || e.AggregateType != "order" || e.AggregateID != "a" || !e.CommitTime.Equal(commit) {
					t.Fatalf("got %+v", e)
				}
				return
			}
			if e.Invalid == nil || !strings.Contains(e.Invalid.Error(), tc.invalid) {
				t.Fatalf("invalid = %v, want it to say %q", e.Invalid, tc.invalid)
			}
		})
	}
	e := m.NewEvent([]Column{col("id", "1"), col("aggregatetype", "o"), col("aggregateid", "a"), null("payload"), col("tenant", "t1")}, commit, "")
	if e.Payload != nil || len(e.Extra) != 1 || e.Extra[0].Name != "tenant" {
		t.Fatalf("payload %q extra %v", e.Payload, e.Extra)
	}
	if v, null, ok := e.Field(m, "tenant"); !ok || null || string(v) != "t1" {
		t.Fatalf("Field(tenant) = %q %v %v", v, null, ok)
	}
	// The key as the id column: both roles read it.
	byID := ColumnMap{AggregateID: "id"}.WithDefaults()
	e = byID.NewEvent([]Column{col("id", "1"), col("aggregatetype", "o"), col("aggregateid", "a")}, commit, "")
	if e.Invalid != nil || e.ID != "1" || e.AggregateID != "1" || len(e.Extra) != 1 || e.Extra[0].Name != "aggregateid" {
		t.Fatalf("key by id: %+v", e)
	}
	// A NULL key: Invalid, and Field says NULL.
	e = m.NewEvent([]Column{col("id", "1"), col("aggregatetype", "o"), null("aggregateid")}, commit, "")
	if v, null, ok := e.Field(m, "aggregateid"); e.Invalid == nil || !e.AggregateIDNull || !e.onlyNullKey || !ok || !null || v != nil {
		t.Fatalf("NULL key: %+v, Field = %q %v %v", e, v, null, ok)
	}
	// A NULL type stays NULL: Debezium writes it as null, not as "".
	e = m.NewEvent([]Column{col("id", "1"), col("aggregatetype", "o"), col("aggregateid", "a"), null("type")}, commit, "")
	if v, null, ok := e.Field(m, "type"); e.Invalid != nil || !e.TypeNull || !ok || !null || v != nil {
		t.Fatalf("NULL type: TypeNull %t, Field(type) = %q %v %v, invalid %v", e.TypeNull, v, null, ok, e.Invalid)
	}
	e = m.NewEvent([]Column{col("id", "1"), col("aggregatetype", "o"), col("aggregateid", "a"), col("type", "")}, commit, "")
	if v, null, ok := e.Field(m, "type"); e.TypeNull || !ok || null || v == nil {
		t.Fatalf("empty type: TypeNull %t, Field(type) = %q %v %v", e.TypeNull, v, null, ok)
	}
}

func TestColumnMapValidate(t *testing.T) {
	if err := (ColumnMap{ID: "x", Payload: "x"}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `"x" is mapped as both`) {
		t.Fatalf("err %v", err)
	}
	// The key may be any column (Debezium's table.field.event.key=id).
	if err := (ColumnMap{ID: "x", AggregateID: "x"}).WithDefaults().Validate(); err != nil {
		t.Fatalf("the key as the id column: %v", err)
	}
	if err := (ColumnMap{}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestTopicPattern: routing.topic_pattern must match the whole topic, and
// an event routed outside it is an error of that event, which names the
// topic and the pattern, whichever router made the topic.
func TestTopicPattern(t *testing.T) {
	const pattern = `outbox\.event\.(order|invoice)`
	for _, tc := range []struct {
		aggType string
		allowed bool
	}{
		{"order", true},
		{"invoice", true},
		{"orders", false}, // a prefix of the topic matches; the whole does not
		{"xorder", false}, // nor a suffix
		{"customer", false},
	} {
		e := &Event{ID: "id-" + tc.aggType, AggregateType: tc.aggType, AggregateID: "a", Origin: "public.outbox"}
		routers := map[string]Router{
			"Routing":     Routing{TopicPattern: pattern}.WithDefaults(),
			"NewRouting":  NewRouting(Routing{TopicPattern: pattern}),
			"TableRouter": TableRouter{Default: NewRouting(Routing{TopicPattern: pattern})},
		}
		var err error
		if routers["AllowTopics"], err = AllowTopics(NewRouting(Routing{}), pattern); err != nil {
			t.Fatal(err)
		}
		for name, rt := range routers {
			m, err := rt.Route(t.Context(), e)
			if tc.allowed {
				if err != nil || m.Topic != "outbox.event."+tc.aggType {
					t.Errorf("%s: %s routes to %q, %v; want its topic", name, tc.aggType, m.Topic, err)
				}
				continue
			}
			var ee *EventError
			var na *TopicNotAllowedError
			if !errors.As(err, &ee) || ee.EventID != e.ID || ee.Origin != e.Origin || !errors.As(err, &na) {
				t.Errorf("%s: %s: error %v, want an EventError of %s with a TopicNotAllowedError", name, tc.aggType, err, e.ID)
				continue
			}
			for _, want := range []string{"outbox.event." + tc.aggType, "routing.topic_pattern", pattern} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q does not name %q", name, err, want)
				}
			}
		}
	}
	if err := (Routing{TopicPattern: "(order"}).Validate(); err == nil || !strings.Contains(err.Error(), "`(order`") {
		t.Errorf("Validate of an unclosed group = %v, want an error naming the pattern", err)
	}
	if _, err := AllowTopics(NewRouting(Routing{}), "(order"); err == nil {
		t.Error("AllowTopics took a pattern that does not compile")
	}
	if rt, err := AllowTopics(Routing{}, ""); err != nil || rt != (Routing{}) {
		t.Errorf("AllowTopics with no pattern = %v, %v; want the router itself", rt, err)
	}
}
