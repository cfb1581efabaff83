package connector

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// oidJSONB is the type a message's headers member has as a column.
const oidJSONB = 3802

func TestRouteHeadersColumn(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name    string
		message bool // the event is a logical decoding message's
		col     Column
		want    []Header // after id and the type header
		wantErr string
	}{
		{name: "strings as is, in the order written", col: Column{Name: "headers", Value: []byte(`{"traceparent": "` + tp + `", "tenant": "a\"b", "é": ""}`)},
			want: []Header{{"traceparent", []byte(tp)}, {"tenant", []byte(`a"b`)}, {"é", []byte{}}}},
		{name: "other values as JSON text", col: Column{Name: "headers", Value: []byte(`{"n": 12.50, "ok": true, "tags": ["x", 1], "o": {"a": null}}`)},
			want: []Header{{"n", []byte("12.50")}, {"ok", []byte("true")}, {"tags", []byte(`["x",1]`)}, {"o", []byte(`{"a":null}`)}}},
		{name: "null value is a null header", col: Column{Name: "headers", Value: []byte(`{"gone": null}`)}, want: []Header{{"gone", nil}}},
		{name: "empty object adds none", col: Column{Name: "headers", Value: []byte(`{}`)}},
		{name: "NULL column adds none", col: Column{Name: "headers", Null: true}},
		{name: "array", col: Column{Name: "headers", Value: []byte(`["a"]`)}, wantErr: `headers are not a JSON object but "[\"a\"]"`},
		{name: "string", col: Column{Name: "headers", Value: []byte(`"traceparent=x"`)}, wantErr: "not a JSON object"},
		{name: "not JSON", col: Column{Name: "headers", Value: []byte(`traceparent=x`)}, wantErr: "headers are not JSON"},
		{name: "truncated", col: Column{Name: "headers", Value: []byte(`{"a": "b"`)}, wantErr: "headers object"},
		{name: "two values", col: Column{Name: "headers", Value: []byte(`{} {}`)}, wantErr: "more than the one JSON object"},
		{name: "text after the object", col: Column{Name: "headers", Value: []byte(`{}}`)}, wantErr: "text after it"},
		{name: "huge", col: Column{Name: "headers", Value: []byte(`{"a": "` + strings.Repeat("x", MaxHeadersColumn) + `"}`)}, wantErr: "over the 65536 the relay takes"},
		{name: "missing column", col: Column{Name: "other", Value: []byte(`{}`)}, wantErr: `routing.headers_column "headers" is not a column of the row`},
		// A logical decoding message's headers member is optional: one
		// left out adds none; one that is there is read as a column is.
		{name: "message without headers", message: true, col: Column{Name: "other", Value: []byte(`{}`)}},
		{name: "message with headers", message: true, col: Column{Name: "headers", Type: oidJSONB, Value: []byte(`{"tenant": "a"}`)}, want: []Header{{"tenant", []byte("a")}}},
		{name: "message with headers that are not an object", message: true, col: Column{Name: "headers", Type: oidJSONB, Value: []byte(`["a"]`)}, wantErr: "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Event{ID: "e1", AggregateType: "order", AggregateID: "1", Type: "T", Origin: "0/1", Extra: []Column{{Name: "x", Value: []byte("y")}, tc.col}}
			if tc.message {
				e.Message = &LogicalMessage{Prefix: "outbox", LSN: 1}
			}
			r := Routing{TypeHeader: "type", HeadersColumn: "headers"}.WithDefaults()
			for _, rt := range []Router{r, NewRouting(r)} {
				m, err := rt.Route(t.Context(), &e)
				if tc.wantErr != "" {
					var ee *EventError
					if !errors.As(err, &ee) || ee.EventID != "e1" || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("%T: err = %v, want an error of event e1 saying %q", rt, err, tc.wantErr)
					}
					if len(err.Error()) > 1000 {
						t.Errorf("error is %d bytes long: it quotes too much of the row", len(err.Error()))
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				want := append([]Header{{"id", []byte("e1")}, {"type", []byte("T")}}, tc.want...)
				if len(m.Headers) != len(want) {
					t.Fatalf("%T: headers = %q, want %q", rt, m.Headers, want)
				}
				for i := range want {
					if m.Headers[i].Key != want[i].Key || string(m.Headers[i].Value) != string(want[i].Value) || (m.Headers[i].Value == nil) != (want[i].Value == nil) {
						t.Errorf("%T: header %d = %s=%q, want %s=%q", rt, i, m.Headers[i].Key, m.Headers[i].Value, want[i].Key, want[i].Value)
					}
				}
				if string(m.Key) != "1" {
					t.Errorf("key = %q", m.Key)
				}
			}
		})
	}
}

// FuzzHeadersFromJSON: whatever a row's headers column holds, the relay
// gets headers or an error, never a panic; an object's headers are as
// many as its entries, and each string value comes back as it was.
func FuzzHeadersFromJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": "b", "n": 1, "x": null}`, `[1]`, `"s"`, `{"a": {"b": [1, "c"]}}`, `{"a": "\u00e9\ud83d\ude00"}`, `{} {}`, `{"a"`, ` { "a" : "b" , "c":""} `, `{"a":"b",}`, "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		hs, err := HeadersFromJSON(text)
		if fast, ok := stringHeaders(text); ok {
			slow, serr := decodeHeaders(text)
			if serr != nil || len(slow) != len(fast) {
				t.Fatalf("%q: the plain-string reader gives %q, the decoder %q, %v", text, fast, slow, serr)
			}
			for i := range fast {
				if fast[i].Key != slow[i].Key || string(fast[i].Value) != string(slow[i].Value) || (fast[i].Value == nil) != (slow[i].Value == nil) {
					t.Fatalf("%q: the plain-string reader gives %q, the decoder %q", text, fast, slow)
				}
			}
		}
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if jerr := json.Unmarshal(text, &m); jerr != nil {
			t.Fatalf("headers %q from %q, which encoding/json refuses: %v", hs, text, jerr)
		}
		if len(m) != len(hs) {
			return // duplicate keys, which the map keeps one of
		}
		for _, h := range hs {
			raw, ok := m[h.Key]
			if !ok {
				t.Fatalf("header %q is no key of %q", h.Key, text)
			}
			var s string
			if raw[0] == '"' && (json.Unmarshal(raw, &s) != nil || string(h.Value) != s) {
				t.Fatalf("header %q = %q, but the object holds %s", h.Key, h.Value, raw)
			}
		}
	})
}

// BenchmarkHeadersFromJSON: the headers column of every event, as the
// outbox package writes it (a trace context), and one the decoder reads.
func BenchmarkHeadersFromJSON(b *testing.B) {
	for _, bc := range []struct{ name, text string }{
		{"trace context", `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=value"}`},
		{"numbers and escapes", `{"n": 12, "note": "a\"b", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			text := []byte(bc.text)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := HeadersFromJSON(text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
