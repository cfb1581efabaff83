package debezium

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/connector"
)

// nested is a JSON object n levels deep: {"a":{"a":...{}...}}.
func nested(n int) string {
	return strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)
}

func TestCheckExpandLimits(t *testing.T) {
	small := expandLimits{maxDepth: 3, maxNumberLength: 4, maxNameBytes: 40, maxBytes: 100}
	for _, tc := range []struct {
		name    string
		payload string
		lim     expandLimits
		// want is the bound exceeded and what the payload has; What ""
		// means within every bound.
		want ExpandLimitError
	}{
		{name: "within every bound", payload: `{"a":{"b":[1,"x"]}}`, lim: small},
		{name: "depth at the limit", payload: `{"a":[{}]}`, lim: small},
		{name: "one level too deep", payload: `{"a":[{"b":{}}]}`, lim: small,
			want: ExpandLimitError{What: "nesting depth", Found: 4, Limit: 3}},
		{name: "arrays count as levels", payload: `[[[[]]]]`, lim: small,
			want: ExpandLimitError{What: "nesting depth", Found: 4, Limit: 3}},
		{name: "the depth found is the document's, past the limit", payload: nested(100_000), lim: expandLimits{maxDepth: 3},
			want: ExpandLimitError{What: "nesting depth", Found: 100_000, Limit: 3}},
		{name: "100,000 levels against the default", payload: nested(100_000),
			want: ExpandLimitError{What: "nesting depth", Found: 100_000, Limit: ExpandMaxDepth}},
		{name: "1000 levels are Jackson's and expand", payload: nested(1000)},
		{name: "brackets in strings are text", payload: `{"[[[[": "{{{{", "b\"[[[": 1}`, lim: small},
		{name: "an escaped backslash ends before the quote", payload: `{"a\\": "[[[[\\"}`, lim: small},
		{name: "text after the first value is not read", payload: `{}` + strings.Repeat("[", 50), lim: small},
		{name: "number at the length limit", payload: `{"n":1234}`, lim: small},
		{name: "number too long", payload: `{"n":-1.5e10}`, lim: small,
			want: ExpandLimitError{What: "number length", Found: 7, Limit: 4}},
		{name: "digits in a string are text", payload: `{"n":"123456789"}`, lim: small},
		{name: "Jackson's number length", payload: `{"n":` + strings.Repeat("9", 1001) + `}`,
			want: ExpandLimitError{What: "number length", Found: 1001, Limit: ExpandMaxNumberLength}},
		// payload (7) + payload.aaaaaaaaaa (18) + its array's element
		// payload.aaaaaaaaaa.b (20): 45 bytes of names.
		{name: "names are full paths, summed", payload: `{"aaaaaaaaaa":[{"b":{}}]}`, lim: small,
			want: ExpandLimitError{What: "schema name bytes", Found: 45, Limit: 40}},
		{name: "scalars have no name", payload: `{"aaaaaaaaaa":1,"bbbbbbbbbb":2,"cccccccccc":3,"dddddddddd":4}`, lim: small},
		// payload, payload.a, ...: 1000 names, the i-th 7+2i bytes,
		// 1,006,000 in all.
		{name: "names grow with the square of the depth", payload: nested(1000),
			lim:  expandLimits{maxNameBytes: 1_000_000},
			want: ExpandLimitError{What: "schema name bytes", Limit: 1_000_000}},
		{name: "the names of 1000 levels", payload: nested(1000), lim: expandLimits{maxNameBytes: 1_006_000}},
		{name: "payload too large", payload: `{"a":"` + strings.Repeat("x", 100) + `"}`, lim: small,
			want: ExpandLimitError{What: "payload bytes", Found: 108, Limit: 100}},
		{name: "unclosed string", payload: `{"a":"[[[[[`, lim: small},
		{name: "unclosed object", payload: `{"a":{"b":`, lim: small},
		{name: "stray closers", payload: `]]]}}}`, lim: small},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkExpandLimits("payload", tc.payload, tc.lim)
			var le *ExpandLimitError
			switch {
			case tc.want.What == "" && err != nil:
				t.Fatalf("err %v, want none", err)
			case tc.want.What == "":
			case !errors.As(err, &le):
				t.Fatalf("err %v, want %s over %d", err, tc.want.What, tc.want.Limit)
			case tc.want.What == "schema name bytes":
				// The sum stops at the first name past the limit.
				if le.What != tc.want.What || le.Limit != tc.want.Limit || le.Found <= le.Limit {
					t.Fatalf("got %+v, want %s past %d", *le, tc.want.What, tc.want.Limit)
				}
			case *le != tc.want:
				t.Fatalf("got %+v, want %+v", *le, tc.want)
			}
		})
	}
}

// The error a user reads names the bound, the value found and Debezium's
// behaviour, so that the dead letter's header says what to do.
func TestExpandLimitErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  ExpandLimitError
		want []string
	}{
		{ExpandLimitError{What: "nesting depth", Found: 100000, Limit: 1000}, []string{"nests 100000 levels deep", "more than the 1000", "maxNestingDepth", "Debezium sends such a payload unexpanded"}},
		{ExpandLimitError{What: "number length", Found: 1001, Limit: 1000}, []string{"1001 characters", "maxNumberLength"}},
		{ExpandLimitError{What: "schema name bytes", Found: 9 << 20, Limit: 8 << 20}, []string{"9437184 or more bytes of schema names"}},
		{ExpandLimitError{What: "value bytes", Found: 40 << 20, Limit: 32 << 20}, []string{"struct values of 41943040 or more bytes"}},
		{ExpandLimitError{What: "payload bytes", Found: 2 << 20, Limit: 1 << 20}, []string{"is 2097152 bytes, more than the 1048576"}},
	} {
		t.Run(tc.err.What, func(t *testing.T) {
			for _, w := range tc.want {
				if !strings.Contains(tc.err.Error(), w) {
					t.Errorf("%q does not say %q", tc.err.Error(), w)
				}
			}
		})
	}
}

func TestExpandBounds(t *testing.T) {
	// sparse is an array of n objects with a different key each: n
	// structs of the n merged fields.
	sparse := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"xs":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"key%06d":1}`, i)
		}
		b.WriteString("]}")
		return b.String()
	}
	// wide is one object of n keys.
	wide := func(n int) string {
		var b strings.Builder
		b.WriteByte('{')
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(`"z":0}`)
		return b.String()
	}
	for _, tc := range []struct {
		name    string
		payload string
		want    string // the bound exceeded; "" for a value
	}{
		{name: "1000 levels expand", payload: nested(1000)},
		{name: "1001 levels do not", payload: nested(1001), want: "nesting depth"},
		{name: "100,000 levels do not", payload: nested(100_000), want: "nesting depth"},
		{name: "over a MiB does not", payload: `{"a":"` + strings.Repeat("x", 1<<20) + `"}`, want: "payload bytes"},
		{name: "a thousand objects of different keys merge", payload: sparse(1000)},
		{name: "3000 objects of different keys would make 9 million fields", payload: sparse(3000), want: "value bytes"},
		// 100,000 keys took eight minutes when each was looked up by a
		// scan; 70,000 (under a MiB) now take a fraction of a second.
		{name: "an object of 70,000 keys", payload: wide(70_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, v, err := expander{}.expand("payload", tc.payload)
			var le *ExpandLimitError
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				if s == nil || v == nil {
					t.Fatal("no value")
				}
			case !errors.As(err, &le) || le.What != tc.want:
				t.Fatalf("err %v, want %s", err, tc.want)
			case errors.Is(err, errNotExpandable):
				t.Fatal("a payload over a bound is an error of its event, not sent as a string")
			}
		})
	}
}

// The innermost struct of a deep payload is named by its full path, as
// Debezium names it, and the tree within the limit is whole.
func TestExpandDeepNames(t *testing.T) {
	s, _, err := expander{}.expand("payload", nested(ExpandMaxDepth))
	if err != nil {
		t.Fatal(err)
	}
	depth := 1
	for len(s.Fields) > 0 {
		s = s.Fields[0].Schema
		depth++
	}
	if want := "payload" + strings.Repeat(".a", ExpandMaxDepth-1); depth != ExpandMaxDepth || s.Name != want {
		t.Fatalf("depth %d, innermost name of %d bytes; want %d and %d", depth, len(s.Name), ExpandMaxDepth, len(want))
	}
}

// A payload over a bound is an error of its event, naming the event, so
// that it goes to the dead letter topic or stops the relay naming it,
// whatever format the value is written in: the bounds are checked before
// any converter sees the payload (the avro case asks no registry).
func TestRouteDeepPayloadIsEventError(t *testing.T) {
	cols := outboxColumns()
	cols[len(cols)-1] = &column{name: "payload", typName: "text"}
	for _, f := range []Format{FormatJSONSchema, FormatJSON, FormatString, FormatAvro} {
		t.Run(string(f), func(t *testing.T) {
			cfg := RouterConfig{Table: "public.outbox", ValueFormat: f, ExpandJSONPayload: true}
			if f == FormatAvro {
				cfg.Registry.URLs = []string{"http://127.0.0.1:1"}
			}
			r := fixedRouter(t, cfg, cols...)
			e := outboxRow(connector.Column{Name: "payload", Value: []byte(nested(100_000))})
			_, err := r.Route(t.Context(), e)
			var ee *connector.EventError
			if !errors.As(err, &ee) || ee.EventID != e.ID {
				t.Fatalf("err %v, want an EventError of event %s", err, e.ID)
			}
			for _, w := range []string{e.ID, "nests 100000 levels deep", "more than the 1000"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

// BenchmarkExpandWorstCase measures what an expansion of a payload at
// ExpandMaxBytes allocates: an array of one-digit numbers is the most
// nodes a byte can make. Its B/op over the payload's size is the factor
// ExpandMaxBytes' comment gives.
func BenchmarkExpandWorstCase(b *testing.B) {
	payload := `{"a":[` + strings.Repeat("0,", ExpandMaxBytes/2-8) + `0]}`
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := (expander{}).expand("payload", payload); err != nil {
			b.Fatal(err)
		}
	}
}
