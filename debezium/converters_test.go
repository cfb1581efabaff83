package debezium

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Java's Double.toString and Float.toString, as Jackson and
// SimpleHeaderConverter print numbers (values from the JDK's own
// documentation and tests).
func TestJavaNumbers(t *testing.T) {
	tenth := 0.1 // a variable, so that 0.1 + 0.2 is float64 arithmetic
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{1, "1.0"}, {100, "100.0"}, {39.98, "39.98"}, {0.001, "0.001"}, {1e-4, "1.0E-4"},
		{9999999, "9999999.0"}, {1e7, "1.0E7"}, {12345678, "1.2345678E7"}, {1234567.5, "1234567.5"},
		{tenth + 0.2, "0.30000000000000004"}, {1.5e300, "1.5E300"}, {-2.5e-10, "-2.5E-10"},
		{0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
		{math.MaxFloat64, "1.7976931348623157E308"}, {123456789012, "1.23456789012E11"}, {0.5, "0.5"},
	} {
		if got := javaDouble(tc.in); got != tc.want {
			t.Errorf("javaDouble(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   float32
		want string
	}{
		{1.1, "1.1"}, {3.4028235e38, "3.4028235E38"}, {1e-5, "1.0E-5"}, {0.25, "0.25"}, {16777216, "1.6777216E7"},
	} {
		if got := javaFloat(tc.in); got != tc.want {
			t.Errorf("javaFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Jackson escapes quotes, backslashes and control characters (the usual
// short escapes, else \u00XX in upper case) and nothing else.
func TestJacksonString(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:            `"plain"`,
		`say "hi"`:         `"say \"hi\""`,
		`back\slash`:       `"back\\slash"`,
		"tab\tnl\ncr\r":    `"tab\tnl\ncr\r"`,
		"\b\f":             `"\b\f"`,
		"\x00\x1f":         `"\u0000\u001F"`,
		"\x7f é ✓ 😀 / <>&": "\"\x7f é ✓ 😀 / <>&\"",
		"\u2028":           "\"\u2028\"",
	} {
		if got := string(appendJacksonString(nil, in)); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
}

var (
	reqString  = &Schema{Type: TypeString}
	testStruct = &Schema{Type: TypeStruct, Name: "s", Fields: []Field{
		{Name: "a", Schema: &Schema{Type: TypeInt32, Optional: true}},
		{Name: "b", Schema: &Schema{Type: TypeString, Optional: true, Default: "x"}},
		{Name: "c", Schema: &Schema{Type: TypeArray, Optional: true, Items: &Schema{Type: TypeBoolean, Optional: true}}},
		{Name: "d", Schema: &Schema{Type: TypeBytes, Optional: true}},
		{Name: "e", Schema: &Schema{Type: TypeFloat32, Optional: true}},
	}}
)

// JsonConverter: the schema's fields in Kafka's order (type, fields or
// items, optional, name, version, default, field), a null with a default
// written as the default (replace.null.with.default), bytes in base64.
func TestJSONConverter(t *testing.T) {
	v := &Struct{Schema: testStruct, Values: []any{int64(7), nil, []any{true, nil}, []byte{0, 0xff}, float32(2.5)}}
	got, err := jsonConvert(true, testStruct, v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema":{"type":"struct","fields":[` +
		`{"type":"int32","optional":true,"field":"a"},` +
		`{"type":"string","optional":true,"default":"x","field":"b"},` +
		`{"type":"array","items":{"type":"boolean","optional":true},"optional":true,"field":"c"},` +
		`{"type":"bytes","optional":true,"field":"d"},` +
		`{"type":"float","optional":true,"field":"e"}],"optional":false,"name":"s"},` +
		`"payload":{"a":7,"b":"x","c":[true,null],"d":"AP8=","e":2.5}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, _ := jsonConvert(false, reqString, "a\"b"); string(got) != `"a\"b"` {
		t.Errorf("string without schema: %s", got)
	}
	if got, _ := jsonConvert(false, &Schema{Type: TypeString, Optional: true}, nil); string(got) != "null" {
		t.Errorf("optional null without schema: %q, want the JSON null", got)
	}
	if got, _ := jsonConvert(true, nil, nil); got != nil {
		t.Errorf("a tombstone (no schema, no value): %q, want nil", got)
	}
	if _, err := jsonConvert(false, reqString, nil); err == nil {
		t.Error("a null for a required string was written; JsonConverter refuses it")
	}
	if got, _ := jsonConvert(false, &Schema{Type: TypeFloat64}, math.NaN()); string(got) != `"NaN"` {
		t.Errorf("NaN: %s, want the string Jackson writes", got)
	}
}

// SimpleHeaderConverter writes Values.convertToString: strings raw,
// numbers and booleans as Java prints them, bytes in base64, structured
// values as JSON-like text.
func TestSimpleHeaderConverter(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"plain \"text\"", `plain "text"`}, {int64(-5), "-5"}, {true, "true"}, {float64(1e-7), "1.0E-7"}, {float32(0.5), "0.5"},
		{[]byte("hi"), "aGk="}, {[]any{"a\"b", int64(1), nil}, `["a\"b",1,null]`},
		{&Struct{Schema: testStruct, Values: []any{int64(1), `x\y`, nil, []byte{1}, nil}}, `{"a":1,"b":"x\\y","c":null,"d":"AQ==","e":null}`},
	} {
		got, err := convertHeader(FormatSimple, nil, tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%#v: got %q (%v), want %q", tc.v, got, err, tc.want)
		}
	}
	if got, _ := convertHeader(FormatSimple, reqString, nil); got != nil {
		t.Errorf("null header: %q, want nil", got)
	}
}

// Debezium's BinaryDataConverter (and ByteBufferConverter) with and
// without delegate.converter.type, case by case of its fromConnectData.
func TestPassThrough(t *testing.T) {
	optBytes := &Schema{Type: TypeBytes, Optional: true}
	optString := &Schema{Type: TypeString, Optional: true}
	envelope := &Struct{Schema: &Schema{Type: TypeStruct, Name: "v", Fields: []Field{{Name: "payload", Schema: optString}}}, Values: []any{"x"}}
	for _, tc := range []struct {
		name     string
		delegate Format
		s        *Schema
		v        any
		want     []byte // nil: a null value
		err      string
	}{
		{name: "bytes unchanged", s: optBytes, v: []byte{0, 0xff, 0xfe, 0x80}, want: []byte{0, 0xff, 0xfe, 0x80}},
		{name: "bytes unchanged despite a delegate", delegate: FormatJSONSchema, s: optBytes, v: []byte{0xc3, 0x28}, want: []byte{0xc3, 0x28}},
		{name: "empty bytes are an empty value", s: optBytes, v: []byte{}, want: []byte{}},
		{name: "null bytes are null", s: optBytes, v: nil},
		{name: "null bytes are null despite a delegate", delegate: FormatJSONSchema, s: optBytes, v: nil},
		{name: "tombstone", delegate: FormatJSONSchema},
		{name: "bytes without a schema", v: []byte{1}, want: []byte{1}},
		{name: "string to the delegate", delegate: FormatJSON, s: optString, v: "a\x00", want: []byte(`"a\u0000"`)},
		{name: "string to StringConverter", delegate: FormatString, s: optString, v: "text", want: []byte("text")},
		// A schema that is not BYTES goes to the delegate even for a null
		// value: JsonConverter with schemas writes the envelope.
		{name: "null string to the delegate", delegate: FormatJSONSchema, s: optString, v: nil,
			want: []byte(`{"schema":{"type":"string","optional":true},"payload":null}`)},
		{name: "struct to the delegate", delegate: FormatJSON, s: envelope.Schema, v: envelope, want: []byte(`{"payload":"x"}`)},
		{name: "string without a delegate", s: optString, v: "text", err: "accept only bytes"},
		{name: "null string without a delegate", s: optString, v: nil, err: "accept only bytes"},
		{name: "struct without a delegate", s: envelope.Schema, v: envelope, err: "accept only bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := passThrough(tc.delegate, tc.s, tc.v)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %q, %v; want an error saying %q", got, err, tc.err)
				}
			case err != nil:
				t.Errorf("error %v", err)
			case tc.want == nil && got != nil:
				t.Errorf("got %q, want null", got)
			case tc.want != nil && (got == nil || string(got) != string(tc.want)):
				t.Errorf("got %q (null %t), want %q", got, got == nil, tc.want)
			}
		})
	}
}

// StringConverter writes toString(): Struct{...} without null fields,
// lists as [a, b]; binary data has no useful toString and is refused.
func TestStringConverter(t *testing.T) {
	v := &Struct{Schema: testStruct, Values: []any{int64(1), nil, []any{true, false}, nil, float32(1e10)}}
	got, err := convert(FormatString, testStruct, v)
	if err != nil || string(got) != "Struct{a=1,c=[true, false],e=1.0E10}" {
		t.Errorf("got %q (%v)", got, err)
	}
	if _, err := convert(FormatString, &Schema{Type: TypeBytes}, []byte{1}); err == nil || !strings.Contains(err.Error(), "ByteArrayConverter") {
		t.Errorf("bytes with StringConverter: %v; want an error pointing to ByteArrayConverter", err)
	}
	if _, err := convert(FormatBytes, reqString, "text"); err == nil || !strings.Contains(err.Error(), "Invalid schema type for ByteArrayConverter") {
		t.Errorf("text with ByteArrayConverter: %v; want Kafka Connect's refusal", err)
	}
}

func TestExpand(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		nullBytes bool
		// want is the JSON written without schemas; schema, when set, the
		// schema written.
		want, schema string
		err          error
	}{
		{name: "nested object named by path", in: `{"a": {"b": 1}}`, want: `{"a":{"b":1}}`,
			schema: `{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":true,"field":"b"}],"optional":true,"name":"payload.a","field":"a"}],"optional":true,"name":"payload"}`},
		{name: "null fields dropped", in: `{"a": null, "b": "x"}`, want: `{"b":"x"}`},
		{name: "null fields kept as optional bytes", in: `{"a": null, "b": "x"}`, nullBytes: true, want: `{"a":null,"b":"x"}`,
			schema: `{"type":"struct","fields":[{"type":"bytes","optional":true,"field":"a"},{"type":"string","optional":true,"field":"b"}],"optional":true,"name":"payload"}`},
		{name: "empty array dropped", in: `{"a": [], "b": true}`, want: `{"b":true}`},
		{name: "long and double", in: `{"big": 10000000000, "d": 1e2, "neg": -0}`, want: `{"big":10000000000,"d":100.0,"neg":0}`,
			schema: `{"type":"struct","fields":[{"type":"int64","optional":true,"field":"big"},{"type":"double","optional":true,"field":"d"},{"type":"int32","optional":true,"field":"neg"}],"optional":true,"name":"payload"}`},
		{name: "objects in an array merge their fields", in: `{"xs": [{"a": 1}, {"b": "x"}, {"a": 2, "b": "y"}]}`,
			want: `{"xs":[{"a":1,"b":null},{"a":null,"b":"x"},{"a":2,"b":"y"}]}`},
		{name: "a null field takes the type other elements give it", in: `{"xs": [{"a": null}, {"a": 5}]}`, nullBytes: true,
			want:   `{"xs":[{"a":null},{"a":5}]}`,
			schema: `{"type":"struct","fields":[{"type":"array","items":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"a"}],"optional":true,"name":"payload.xs"},"optional":true,"field":"xs"}],"optional":true,"name":"payload"}`},
		{name: "null array elements", in: `{"xs": [null, "a"]}`, want: `{"xs":[null,"a"]}`},
		{name: "repeated key: first place, last value", in: `{"a": 1, "b": 2, "a": 3}`, want: `{"a":3,"b":2}`},
		{name: "text after the value is not read", in: `{"a": 1} trailing`, want: `{"a":1}`},
		{name: "mixed array is not expanded", in: `{"xs": [1, "a"]}`, err: errNotExpandable},
		{name: "int and double in one array is not expanded", in: `{"xs": [1, 1.5]}`, err: errNotExpandable},
		{name: "array of nulls is not expanded", in: `{"xs": [null]}`, err: errNotExpandable},
		{name: "not JSON", in: `{"a": `, err: errNotExpandable},
		{name: "not an object", in: `"text"`, err: errNotExpandable},
		{name: "leading space", in: ` {"a": 1}`, err: errNotExpandable},
		{name: "top-level array", in: `[1, 2]`, err: errTopLevelArray},
		{name: "clashing types in merged objects", in: `{"xs": [{"a": 1}, {"a": "x"}]}`, err: errors.New("does not fit")},
		{name: "integer beyond 64 bits", in: `{"n": 123456789012345678901234567890}`, err: errors.New("does not fit in 64 bits")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, v, err := expander{nullsAsBytes: tc.nullBytes}.expand("payload", tc.in)
			if tc.err != nil {
				if err == nil || !(errors.Is(err, tc.err) || strings.Contains(err.Error(), tc.err.Error())) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := jsonConvert(false, s, v)
			if err != nil || string(got) != tc.want {
				t.Errorf("got %s (%v), want %s", got, err, tc.want)
			}
			if tc.schema != "" {
				if got := string(appendSchemaJSON(nil, s, "")); got != tc.schema {
					t.Errorf("schema\n got %s\nwant %s", got, tc.schema)
				}
			}
		})
	}
}

// RegexRouter: the regex must match the whole value, then the first match
// is replaced (Java's matches() then replaceFirst()); Java's replacement
// syntax.
func TestTopicRouter(t *testing.T) {
	for _, tc := range []struct {
		regex, repl, in, want string
	}{
		{DefaultTopicRegex, DefaultTopicReplacement, "order", "outbox.event.order"},
		{DefaultTopicRegex, "${routedByValue}.events", "Order", "Order.events"},
		{"(.*)-(.*)", "$2.$1", "a-b", "b.a"},
		{"(.*)", "x$12", "v", "xv2"}, // one group: $1 then the literal 2
		{"(.*)", `\$1\\`, "v", `$1\`},
		{"a|ab", "X", "ab", "Xb"}, // the full match is ab, the first match a
		{"order", "orders", "customer", "customer"},
		{"(?<kind>[a-z]+)(?:_v(?<v>[0-9]+))?", "${kind}.v$2", "order", "order.v"},
	} {
		tr, err := newTopicRouter(tc.regex, tc.repl)
		if err != nil {
			t.Errorf("%s / %s: %v", tc.regex, tc.repl, err)
			continue
		}
		if got := tr.route(tc.in); got != tc.want {
			t.Errorf("%s / %s on %q: %q, want %q", tc.regex, tc.repl, tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ regex, repl, want string }{
		{"(.*)", "$2", "no group 2"},
		{"(.*)", "${nope}", "no group with name {nope}"},
		{"(.*)", "a$", "group index is missing"},
		{"(.*)", "$x", "illegal group reference"},
		{"(.*)", `a\`, "character to be escaped is missing"},
		{"(?=a)", "x", "lookaround"},
	} {
		if _, err := newTopicRouter(tc.regex, tc.repl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s / %s: %v, want an error saying %q", tc.regex, tc.repl, err, tc.want)
		}
	}
}

// table.fields.additional.placement entries as
// EventRouterConfigDefinition.parseAdditionalFieldsConfig reads them: the
// column, the placement (any case) and the alias each trimmed of spaces,
// the alias the column's name when absent.
func TestParseAdditionalField(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want AdditionalField
	}{
		{"type:header", AdditionalField{Column: "type", Placement: PlaceHeader, Alias: "type"}},
		{"type:envelope:eventType", AdditionalField{Column: "type", Placement: PlaceEnvelope, Alias: "eventType"}},
		{"type : header : eventType", AdditionalField{Column: "type", Placement: PlaceHeader, Alias: "eventType"}},
		{" shard :Partition ", AdditionalField{Column: "shard", Placement: PlacePartition, Alias: "shard"}},
	} {
		got, err := ParseAdditionalField(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v (%v), want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"type", " :header", "type:body", "type:header: ", "a:header:b:c"} {
		if _, err := ParseAdditionalField(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// Columns as Debezium's PostgreSQL connector types them, with its default
// settings, and the defaults it puts in schemas.
func TestColumns(t *testing.T) {
	for _, tc := range []struct {
		c      column
		text   string
		schema string
		value  any
	}{
		{column{name: "b", typName: "bool"}, "t", `{"type":"boolean","optional":true}`, true},
		{column{name: "n", typName: "int8", notNull: true, defaultExpr: "nextval('s'::regclass)"}, "42", `{"type":"int64","optional":false,"default":0}`, int64(42)},
		{column{name: "i", typName: "int4", defaultExpr: "7"}, "-3", `{"type":"int32","optional":true,"default":7}`, int64(-3)},
		{column{name: "i", typName: "int4", defaultExpr: "NULL::integer"}, "1", `{"type":"int32","optional":true}`, int64(1)},
		{column{name: "u", typName: "uuid", notNull: true, defaultExpr: "gen_random_uuid()"}, "4D47E190-0402-4048-BC2C-89DD54343CDC",
			`{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1,"default":"00000000-0000-0000-0000-000000000000"}`,
			"4d47e190-0402-4048-bc2c-89dd54343cdc"},
		{column{name: "s", typName: "varchar", defaultExpr: "'abc'::character varying"}, "x", `{"type":"string","optional":true,"default":"abc"}`, "x"},
		{column{name: "s", typName: "varchar", defaultExpr: "NULL::character varying"}, "x", `{"type":"string","optional":true}`, "x"},
		{column{name: "s", typName: "text", defaultExpr: "'it''s'::text"}, "x", `{"type":"string","optional":true,"default":"it's"}`, "x"},
		{column{name: "j", typName: "jsonb", defaultExpr: "NULL::jsonb"}, "{}", `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`, "{}"},
		{column{name: "j", typName: "jsonb", defaultExpr: "'{}'::jsonb"}, `{"a": 1}`, `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"default":"{}"}`, `{"a": 1}`},
		{column{name: "d", typName: "date"}, "2024-01-02", `{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1}`, int64(19724)},
		{column{name: "t", typName: "timestamp", typMod: -1}, "2019-05-03 13:31:34.484123",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1}`, int64(1556890294484123)},
		{column{name: "t", typName: "timestamp", typMod: 3}, "2019-05-03 13:31:34.484",
			`{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1}`, int64(1556890294484)},
		{column{name: "tz", typName: "timestamptz", typMod: -1, defaultExpr: "now()"}, "2024-01-02 03:04:05.12+01",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00.000000Z"}`, "2024-01-02T02:04:05.120000Z"},
		{column{name: "tz", typName: "timestamptz", typMod: -1, defaultExpr: "CURRENT_TIMESTAMP"}, "2024-01-02 03:04:05+05:30",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`, "2024-01-01T21:34:05.000000Z"},
		{column{name: "f", typName: "float4"}, "1.5", `{"type":"float","optional":true}`, float32(1.5)},
		{column{name: "by", typName: "bytea"}, "\x01", `{"type":"bytes","optional":true}`, []byte{1}},
	} {
		s, err := tc.c.schema()
		if err != nil {
			t.Errorf("%s: %v", tc.c.typName, err)
			continue
		}
		if got := string(appendSchemaJSON(nil, s, "")); got != tc.schema {
			t.Errorf("%s %q schema\n got %s\nwant %s", tc.c.typName, tc.c.defaultExpr, got, tc.schema)
		}
		v, err := tc.c.value([]byte(tc.text), false)
		if err != nil || !equalValue(v, tc.value) {
			t.Errorf("%s %q: value %#v (%v), want %#v", tc.c.typName, tc.text, v, err, tc.value)
		}
	}
	if _, err := (&column{name: "g", typName: "geometry"}).schema(); !errors.Is(err, errUnsupportedType) {
		t.Errorf("geometry: %v, want errUnsupportedType", err)
	}
}

func equalValue(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && string(ab) == string(bb)
	}
	return a == b
}

// With no Debezium option set, the router writes outboxrelay's own
// records: the same as connector.Routing, byte for byte.
func TestRawRouterIsDefaultRouting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		const chars = "abcXYZ019._-é\"\\ {}"
		b := make([]rune, rng.IntN(12))
		for i := range b {
			b[i] = []rune(chars)[rng.IntN(len([]rune(chars)))]
		}
		return string(b)
	}
	meta := &tableMeta{schema: "public", table: "outbox", columns: []*column{
		{name: "id", typName: "uuid", notNull: true}, {name: "aggregatetype", typName: "varchar", notNull: true},
		{name: "aggregateid", typName: "varchar", notNull: true}, {name: "type", typName: "varchar", notNull: true},
		{name: "payload", typName: "jsonb"}}}
	for _, typeHeader := range []string{"", "eventType"} {
		for _, prefix := range []string{"", "events."} {
			rt, err := NewRouter(RouterConfig{PostgresURL: "postgres://x@y/z", TopicPrefix: prefix, TypeHeader: typeHeader})
			if err != nil {
				t.Fatal(err)
			}
			rt.tables.catalog = catalogFunc(func(context.Context, string) (*tableMeta, error) { return meta, nil })
			def := connector.Routing{TopicPrefix: prefix, TypeHeader: typeHeader}.WithDefaults()
			for range 500 {
				e := connector.Event{ID: word(), AggregateType: word(), AggregateID: word(), Type: word(),
					CommitTime: time.UnixMilli(rng.Int64N(1 << 41)), Origin: "test"}
				if rng.IntN(4) > 0 {
					e.Payload = []byte(word())
				}
				if rng.IntN(8) == 0 {
					e.Type, e.TypeNull = "", true
				}
				want, wantErr := def.Route(t.Context(), &e)
				got, gotErr := rt.Route(t.Context(), &e)
				if (wantErr == nil) != (gotErr == nil) {
					t.Fatalf("%+v: default router err %v, Debezium router err %v", e, wantErr, gotErr)
				}
				if wantErr == nil && !reflect.DeepEqual(got, want) {
					t.Fatalf("%+v:\n got %+v\nwant %+v", e, got, want)
				}
			}
		}
	}
}

// A delegate format only makes sense beside bytes, and lets bytes write the
// structs of envelope fields and expanded payloads.
func TestDelegateFormatConfig(t *testing.T) {
	base := RouterConfig{PostgresURL: "postgres://h/db"}
	for _, tc := range []struct {
		name string
		edit func(*RouterConfig)
		err  string // "" for valid
	}{
		{name: "bytes with a JSON delegate", edit: func(c *RouterConfig) { c.KeyFormat, c.KeyDelegateFormat = FormatBytes, FormatJSON }},
		{name: "bytes with a string delegate", edit: func(c *RouterConfig) { c.ValueFormat, c.ValueDelegateFormat = FormatBytes, FormatString }},
		{name: "a delegate without bytes", edit: func(c *RouterConfig) { c.ValueFormat, c.ValueDelegateFormat = FormatJSON, FormatString },
			err: `routing.value_delegate_format "string" writes what value_format bytes cannot`},
		{name: "bytes as the delegate", edit: func(c *RouterConfig) { c.KeyFormat, c.KeyDelegateFormat = FormatBytes, FormatBytes },
			err: `routing.key_delegate_format: "bytes" is not one of string, json, json+schema`},
		{name: "envelope with bytes alone", edit: func(c *RouterConfig) {
			c.ValueFormat, c.AdditionalFields = FormatBytes, []string{"type:envelope"}
		}, err: "envelope fields make the value a struct"},
		{name: "envelope with a structured delegate", edit: func(c *RouterConfig) {
			c.ValueFormat, c.ValueDelegateFormat, c.AdditionalFields = FormatBytes, FormatJSONSchema, []string{"type:envelope"}
		}},
		{name: "expanded payload with a structured delegate", edit: func(c *RouterConfig) {
			c.ValueFormat, c.ValueDelegateFormat, c.ExpandJSONPayload = FormatBytes, FormatJSON, true
		}},
		{name: "expanded payload with bytes alone", edit: func(c *RouterConfig) { c.ValueFormat, c.ExpandJSONPayload = FormatBytes, true },
			err: "expand_json_payload makes the payload a struct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Validate: %v; want an error saying %q", err, tc.err)
			}
		})
	}
}

// With bytes and no delegate, a key or payload column that is not bytea is
// refused when the catalog is read, naming the column and the ways out,
// before any record; with a delegate, or a bytea column, it is not.
func TestBytesColumnCheck(t *testing.T) {
	table := func(payload, aggID string) *tableMeta {
		return &tableMeta{schema: "public", table: "outbox", columns: []*column{
			{name: "id", typName: "uuid", notNull: true}, {name: "aggregatetype", typName: "varchar", notNull: true},
			{name: "aggregateid", typName: aggID, notNull: true}, {name: "type", typName: "varchar", notNull: true},
			{name: "payload", typName: payload}}}
	}
	for _, tc := range []struct {
		name  string
		cfg   RouterConfig
		table *tableMeta
		errs  []string
	}{
		{name: "bytea payload", cfg: RouterConfig{ValueFormat: FormatBytes}, table: table("bytea", "varchar")},
		{name: "jsonb payload", cfg: RouterConfig{ValueFormat: FormatBytes}, table: table("jsonb", "varchar"),
			errs: []string{`value column "payload" has type jsonb`, "make the column bytea", "routing.value_delegate_format", "value.converter.delegate.converter.type"}},
		{name: "jsonb payload with a delegate", cfg: RouterConfig{ValueFormat: FormatBytes, ValueDelegateFormat: FormatJSON}, table: table("jsonb", "varchar")},
		{name: "varchar key", cfg: RouterConfig{KeyFormat: FormatBytes}, table: table("bytea", "varchar"),
			errs: []string{`key column "aggregateid" has type varchar`, "routing.key_delegate_format", "key.converter.delegate.converter.type"}},
		{name: "bytea key", cfg: RouterConfig{KeyFormat: FormatBytes}, table: table("jsonb", "bytea")},
		{name: "both", cfg: RouterConfig{KeyFormat: FormatBytes, ValueFormat: FormatBytes}, table: table("text", "varchar"),
			errs: []string{`key column "aggregateid"`, `value column "payload" has type text`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PostgresURL = "postgres://h/db"
			r, err := NewRouter(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r.tables.catalog = catalogFunc(func(context.Context, string) (*tableMeta, error) { return tc.table, nil })
			err = r.Check(context.Background())
			wantCheck(t, err, tc.errs)
		})
	}
}

// wantCheck holds Router.Check's err to errs: none when errs is empty,
// otherwise a permanent error that says each of them.
func wantCheck(t *testing.T, err error, errs []string) {
	t.Helper()
	if len(errs) == 0 {
		if err != nil {
			t.Errorf("Check: %v", err)
		}
		return
	}
	if !connector.IsPermanent(err) {
		t.Errorf("Check: %v; want a permanent error", err)
	}
	for _, want := range errs {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v; want it to say %q", err, want)
		}
	}
}
