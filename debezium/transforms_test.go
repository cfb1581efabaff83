package debezium

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// The fixtures below follow the Java classes of apache/kafka's
// connect/transforms/src/main/java/org/apache/kafka/connect/transforms/
// (cited by file name), applied to the record Debezium's outbox router
// makes of the documentation's row with an envelope field
// (type:envelope:eventType, topic.prefix dbserver1), written with
// JsonConverter (schemas.enable=true) for key and value and
// SimpleHeaderConverter for headers. The record, before any transform:
//
//	topic     outbox.event.order, no partition, timestamp 1700000000123
//	          (2023-11-14T22:13:20.123Z)
//	headers   id=4d47e190-0402-4048-bc2c-89dd54343cdc
//	key       the aggregateid column, a required string: "1"
//	value     struct dbserver1.public.outbox.order.Value
//	          {payload: optional io.debezium.data.Json v1, eventType:
//	          optional string}
const (
	trID          = "4d47e190-0402-4048-bc2c-89dd54343cdc"
	trKey         = `{"schema":{"type":"string","optional":false},"payload":"1"}`
	trPayloadJSON = `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"}`
	trTypeJSON    = `{"type":"string","optional":true,"field":"eventType"}`
	trValueName   = `"optional":false,"name":"dbserver1.public.outbox.order.Value"`
	trValue       = `{"schema":{"type":"struct","fields":[` + trPayloadJSON + `,` + trTypeJSON + `],` + trValueName + `},"payload":{"payload":"{\"a\": 1}","eventType":"OrderCreated"}}`
)

// trRouted is what the test routes: the record's parts, or whether it was
// dropped.
type trRouted struct {
	topic, key, value string
	headers           []string
	filtered          bool
}

func routeTransformed(t *testing.T, ts []Transform, ps []Predicate, e *connector.Event, extra ...string) (trRouted, error) {
	t.Helper()
	cfg := RouterConfig{KeyFormat: FormatJSONSchema, ValueFormat: FormatJSONSchema, HeaderFormat: FormatSimple,
		AdditionalFields: append([]string{"type:envelope:eventType"}, extra...), SchemaTopicPrefix: "dbserver1", Transforms: ts, Predicates: ps}
	if e == nil {
		e = trRow()
	}
	m, err := fixedRouter(t, cfg, outboxColumns(&column{name: "shard", typName: "int4"})...).Route(t.Context(), e)
	if err != nil {
		return trRouted{}, err
	}
	r := trRouted{topic: m.Topic, key: string(m.Key), value: string(m.Value), filtered: m.Filtered}
	for _, h := range m.Headers {
		r.headers = append(r.headers, h.Key+"="+string(h.Value))
	}
	return r, nil
}

func trRow(extra ...connector.Column) *connector.Event {
	e := outboxRow(append([]connector.Column{{Name: "type", Value: []byte("OrderCreated")}, {Name: "payload", Value: []byte(`{"a": 1}`)}}, extra...)...)
	e.CommitTime = time.UnixMilli(1700000000123)
	return e
}

func opts(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestTransforms(t *testing.T) {
	base := trRouted{topic: "outbox.event.order", key: trKey, value: trValue, headers: []string{"id=" + trID}}
	with := func(f func(*trRouted)) trRouted {
		r := base
		r.headers = append([]string(nil), base.headers...)
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name  string
		ts    []Transform
		ps    []Predicate
		event *connector.Event
		extra []string
		want  trRouted
	}{
		{name: "none", want: base},
		// RegexRouter.java: Matcher.matches, then replaceFirst.
		{name: "RegexRouter", ts: []Transform{{Name: "r", Type: "org.apache.kafka.connect.transforms.RegexRouter", Options: opts("regex", `outbox\.event\.(.*)`, "replacement", "events-$1")}},
			want: with(func(r *trRouted) { r.topic = "events-order" })},
		{name: "RegexRouter that does not match the whole topic", ts: []Transform{{Name: "r", Type: "RegexRouter", Options: opts("regex", `event`, "replacement", "x")}},
			want: base},
		// TimestampRouter.java: topic.format ${topic}-${timestamp},
		// timestamp.format yyyyMMdd, SimpleDateFormat in UTC.
		{name: "TimestampRouter", ts: []Transform{{Name: "ts", Type: "TimestampRouter"}},
			want: with(func(r *trRouted) { r.topic = "outbox.event.order-20231114" })},
		{name: "TimestampRouter with formats", ts: []Transform{{Name: "ts", Type: "TimestampRouter", Options: opts("topic.format", "${timestamp}.${topic}", "timestamp.format", "yyyy-MM-dd'T'HH.mm.ss.SSS")}},
			want: with(func(r *trRouted) { r.topic = "2023-11-14T22.13.20.123.outbox.event.order" })},
		// InsertHeader.java: Values.parseString(value.literal), added last;
		// SimpleHeaderConverter writes a string as it is, an INT8 and a
		// FLOAT32 by Values.convertToString (Byte.toString,
		// Float.toString), a null as a null header.
		{name: "InsertHeader, text", ts: []Transform{{Name: "h", Type: "InsertHeader", Options: opts("header", "origin", "value.literal", "outboxrelay relay")}},
			want: with(func(r *trRouted) { r.headers = append(r.headers, "origin=outboxrelay relay") })},
		{name: "InsertHeader, numbers and booleans", ts: []Transform{
			{Name: "a", Type: "InsertHeader", Options: opts("header", "n", "value.literal", "42")},
			{Name: "b", Type: "InsertHeader", Options: opts("header", "f", "value.literal", "1.50")},
			{Name: "c", Type: "InsertHeader", Options: opts("header", "b", "value.literal", " true ")},
			{Name: "d", Type: "InsertHeader", Options: opts("header", "z", "value.literal", "null")}},
			want: with(func(r *trRouted) { r.headers = append(r.headers, "n=42", "f=1.5", "b=true", "z=") })},
		// DropHeaders.java: every header of a listed name goes.
		{name: "DropHeaders", ts: []Transform{{Name: "d", Type: "DropHeaders", Options: opts("headers", "id, other")}},
			want: with(func(r *trRouted) { r.headers = nil })},
		// HeaderFrom.java: the field's value and schema as a header, added
		// last; move rebuilds the schema by copySchemaBasics without the
		// field.
		{name: "HeaderFrom$Value, copy", ts: []Transform{{Name: "hf", Type: "HeaderFrom$Value", Options: opts("fields", "eventType", "headers", "type", "operation", "copy")}},
			want: with(func(r *trRouted) { r.headers = append(r.headers, "type=OrderCreated") })},
		{name: "HeaderFrom$Value, move", ts: []Transform{{Name: "hf", Type: "org.apache.kafka.connect.transforms.HeaderFrom$Value", Options: opts("fields", "eventType", "headers", "type", "operation", "move")}},
			want: with(func(r *trRouted) {
				r.headers = append(r.headers, "type=OrderCreated")
				r.value = `{"schema":{"type":"struct","fields":[` + trPayloadJSON + `],` + trValueName + `},"payload":{"payload":"{\"a\": 1}"}}`
			})},
		// InsertField.java: the fields after the struct's own, optional
		// unless the name ends in !; a partition only when the record has
		// one (none here: the producer picks it), the timestamp as
		// Connect's Timestamp of the record's.
		{name: "InsertField$Value", ts: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("topic.field", "topic!", "partition.field", "partition", "timestamp.field", "ts?", "static.field", "source", "static.value", "relay")}},
			want: with(func(r *trRouted) {
				r.value = `{"schema":{"type":"struct","fields":[` + trPayloadJSON + `,` + trTypeJSON + `,` +
					`{"type":"string","optional":false,"field":"topic"},{"type":"int32","optional":true,"field":"partition"},` +
					`{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"ts"},{"type":"string","optional":true,"field":"source"}],` + trValueName + `},` +
					`"payload":{"payload":"{\"a\": 1}","eventType":"OrderCreated","topic":"outbox.event.order","partition":null,"ts":1700000000123,"source":"relay"}}`
			})},
		{name: "InsertField$Value with a partition placement", extra: []string{"shard:partition"}, event: trRow(connector.Column{Name: "shard", Value: []byte("2")}),
			ts: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("partition.field", "p")}},
			want: with(func(r *trRouted) {
				r.value = `{"schema":{"type":"struct","fields":[` + trPayloadJSON + `,` + trTypeJSON + `,{"type":"int32","optional":true,"field":"p"}],` + trValueName + `},` +
					`"payload":{"payload":"{\"a\": 1}","eventType":"OrderCreated","p":2}}`
			})},
		// ReplaceField.java: exclude wins over include; renames from:to.
		{name: "ReplaceField$Value", ts: []Transform{{Name: "rf", Type: "ReplaceField$Value", Options: opts("include", "payload,eventType", "exclude", "payload", "renames", "eventType:type")}},
			want: with(func(r *trRouted) {
				r.value = `{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"field":"type"}],` + trValueName + `},"payload":{"type":"OrderCreated"}}`
			})},
		// ValueToKey.java: an unnamed required struct of the fields.
		{name: "ValueToKey", ts: []Transform{{Name: "vk", Type: "ValueToKey", Options: opts("fields", "eventType")}},
			want: with(func(r *trRouted) {
				r.key = `{"schema":{"type":"struct","fields":[` + trTypeJSON + `],"optional":false},"payload":{"eventType":"OrderCreated"}}`
			})},
		// Filter.java returns null; predicates/*.java, and
		// TransformationStage.apply: the transform applies when
		// negate ^ predicate.test(record).
		{name: "Filter on TopicNameMatches", ts: []Transform{{Name: "f", Type: "Filter", Predicate: "orders"}},
			ps:   []Predicate{{Name: "orders", Type: "org.apache.kafka.connect.transforms.predicates.TopicNameMatches", Options: opts("pattern", `outbox\.event\.ord.*`)}},
			want: trRouted{topic: "outbox.event.order", filtered: true}},
		{name: "Filter on TopicNameMatches, negated", ts: []Transform{{Name: "f", Type: "Filter", Predicate: "orders", Negate: true}},
			ps:   []Predicate{{Name: "orders", Type: "TopicNameMatches", Options: opts("pattern", `outbox\.event\.ord.*`)}},
			want: base},
		{name: "TopicNameMatches matches the whole topic", ts: []Transform{{Name: "f", Type: "Filter", Predicate: "p"}},
			ps:   []Predicate{{Name: "p", Type: "TopicNameMatches", Options: opts("pattern", `order`)}},
			want: base},
		{name: "Filter on HasHeaderKey", ts: []Transform{{Name: "f", Type: "Filter", Predicate: "h"}},
			ps:   []Predicate{{Name: "h", Type: "HasHeaderKey", Options: opts("name", "id")}},
			want: trRouted{topic: "outbox.event.order", filtered: true}},
		{name: "HasHeaderKey of a header the record lacks", ts: []Transform{{Name: "f", Type: "Filter", Predicate: "h"}},
			ps:   []Predicate{{Name: "h", Type: "HasHeaderKey", Options: opts("name", "absent")}},
			want: base},
		{name: "RecordIsTombstone, not one", ts: []Transform{{Name: "f", Type: "Filter", Predicate: "t"}},
			ps:   []Predicate{{Name: "t", Type: "RecordIsTombstone"}},
			want: base},
		{name: "a predicate on another transform", ts: []Transform{{Name: "r", Type: "RegexRouter", Predicate: "h", Options: opts("regex", ".*", "replacement", "with-id")}},
			ps:   []Predicate{{Name: "h", Type: "HasHeaderKey", Options: opts("name", "id")}},
			want: with(func(r *trRouted) { r.topic = "with-id" })},
		// The $Key variants work on the struct a ValueToKey made: InsertField
		// and ReplaceField rebuild it by copySchemaBasics (unnamed, so
		// still unnamed), HeaderFrom copies a field of it.
		{name: "the $Key transforms after ValueToKey", ts: []Transform{
			{Name: "key", Type: "ValueToKey", Options: opts("fields", "eventType")},
			{Name: "ins", Type: "InsertField$Key", Options: opts("static.field", "src", "static.value", "x")},
			{Name: "ren", Type: "ReplaceField$Key", Options: opts("renames", "eventType:type")},
			{Name: "hdr", Type: "HeaderFrom$Key", Options: opts("fields", "type", "headers", "t", "operation", "copy")}},
			want: with(func(r *trRouted) {
				r.key = `{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"field":"type"},{"type":"string","optional":true,"field":"src"}],"optional":false},"payload":{"type":"OrderCreated","src":"x"}}`
				r.headers = append(r.headers, "t=OrderCreated")
			})},
		// A chain of three, each seeing what the one before made:
		// ValueToKey takes eventType into the key, ReplaceField then
		// drops it from the value, and RegexRouter renames the topic.
		{name: "a chain of three", ts: []Transform{
			{Name: "key", Type: "ValueToKey", Options: opts("fields", "eventType")},
			{Name: "drop", Type: "ReplaceField$Value", Options: opts("exclude", "eventType")},
			{Name: "route", Type: "RegexRouter", Options: opts("regex", `outbox\.event\.(.*)`, "replacement", "$1-events")}},
			want: trRouted{topic: "order-events", headers: []string{"id=" + trID},
				key:   `{"schema":{"type":"struct","fields":[` + trTypeJSON + `],"optional":false},"payload":{"eventType":"OrderCreated"}}`,
				value: `{"schema":{"type":"struct","fields":[` + trPayloadJSON + `],` + trValueName + `},"payload":{"payload":"{\"a\": 1}"}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := routeTransformed(t, tc.ts, tc.ps, tc.event, tc.extra...)
			if err != nil {
				t.Fatal(err)
			}
			if got.topic != tc.want.topic || got.key != tc.want.key || got.value != tc.want.value || strings.Join(got.headers, "|") != strings.Join(tc.want.headers, "|") || got.filtered != tc.want.filtered {
				t.Errorf("routed\n topic %q filtered %t headers %q\n key   %s\n value %s\nwant\n topic %q filtered %t headers %q\n key   %s\n value %s",
					got.topic, got.filtered, got.headers, got.key, got.value, tc.want.topic, tc.want.filtered, tc.want.headers, tc.want.key, tc.want.value)
			}
		})
	}
}

// TestTransformRefusals: what Kafka Connect would fail on, at the record
// or at configure, fails here too, naming the transform and the cause.
func TestTransformRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     RouterConfig
		event   *connector.Event
		err     string // of Route; empty: NewRouter refuses with compile
		compile string
	}{
		// Requirements.requireStruct: the payload column is a string.
		{name: "InsertField on a payload that expands to no struct", cfg: RouterConfig{ValueFormat: FormatJSON, ExpandJSONPayload: true, Transforms: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("topic.field", "t")}}},
			event: outboxRow(connector.Column{Name: "payload", Value: []byte(`"just text"`)}),
			err:   `transform i: only Struct objects supported for [field insertion], found: java.lang.String`},
		{name: "InsertField where the value is never a struct", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("topic.field", "t")}}},
			compile: `Kafka Connect's InsertField$Value fails on every record with a payload`},
		{name: "InsertField$Key without a ValueToKey before it", cfg: RouterConfig{KeyFormat: FormatJSON, ValueFormat: FormatJSON, Transforms: []Transform{{Name: "i", Type: "InsertField$Key", Options: opts("topic.field", "t")}}},
			compile: `the routed key is the aggregate id column unless a ValueToKey before it makes one`},
		{name: "ValueToKey on a tombstone", cfg: RouterConfig{KeyFormat: FormatJSON, ValueFormat: FormatJSON, AdditionalFields: []string{"type:envelope"}, TombstoneOnEmptyPayload: true, Transforms: []Transform{{Name: "k", Type: "ValueToKey", Options: opts("fields", "x")}}},
			event: outboxRow(connector.Column{Name: "payload", Null: true}),
			err:   `only Map objects supported in absence of schema for [copying fields from value to key], found: null`},
		{name: "ValueToKey of a field the value lacks", cfg: RouterConfig{KeyFormat: FormatJSON, ValueFormat: FormatJSON, AdditionalFields: []string{"type:envelope"}, Transforms: []Transform{{Name: "k", Type: "ValueToKey", Options: opts("fields", "nope")}}},
			err: `field does not exist: nope`},
		{name: "InsertField of a field the struct has", cfg: RouterConfig{ValueFormat: FormatJSON, AdditionalFields: []string{"type:envelope"}, Transforms: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("static.field", "type", "static.value", "x")}}},
			err: `field name duplication type`},
		{name: "a required partition field without a partition", cfg: RouterConfig{ValueFormat: FormatJSON, AdditionalFields: []string{"type:envelope"}, Transforms: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("partition.field", "p!")}}},
			err: `field p is required`},
		{name: "a topic the transforms make that Kafka refuses", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "r", Type: "RegexRouter", Options: opts("regex", ".*", "replacement", "a b")}}},
			err: `the transforms' topic`},
		{name: "unknown transform", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "c", Type: "org.apache.kafka.connect.transforms.Cast$Value"}}},
			compile: `transform "c" (org.apache.kafka.connect.transforms.Cast$Value): org.apache.kafka.connect.transforms.Cast$Value is not a transform outboxrelay applies`},
		{name: "unknown option", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "r", Type: "RegexRouter", Options: opts("regex", "a", "replacement", "b", "regexp", "c")}}},
			compile: `option regexp is not one outboxrelay reads (regex, replacement)`},
		{name: "unknown predicate", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "f", Type: "Filter", Predicate: "p"}}, Predicates: []Predicate{{Name: "p", Type: "com.example.Mine"}}},
			compile: `predicate "p": com.example.Mine is not a predicate outboxrelay tests`},
		{name: "offset.field", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "i", Type: "InsertField$Value", Options: opts("offset.field", "o")}}},
			compile: `offset.field: InsertField takes the offset from a sink record only`},
		{name: "a transform of a raw part", cfg: RouterConfig{Transforms: []Transform{{Name: "h", Type: "InsertHeader", Options: opts("header", "a", "value.literal", "b")}}},
			compile: `routing.header_format raw writes the column as stored`},
		{name: "an array literal", cfg: RouterConfig{ValueFormat: FormatJSON, HeaderFormat: FormatSimple, Transforms: []Transform{{Name: "h", Type: "InsertHeader", Options: opts("header", "a", "value.literal", "[1,2]")}}},
			compile: `is read as a Connect array or map`},
		{name: "a week-year pattern", cfg: RouterConfig{ValueFormat: FormatJSON, Transforms: []Transform{{Name: "t", Type: "TimestampRouter", Options: opts("timestamp.format", "YYYY")}}},
			compile: `depends on the JVM's locale`},
		{name: "HeaderFrom lists of two lengths", cfg: RouterConfig{ValueFormat: FormatJSON, HeaderFormat: FormatSimple, Transforms: []Transform{{Name: "h", Type: "HeaderFrom$Value", Options: opts("fields", "a,b", "headers", "a", "operation", "copy")}}},
			compile: `'fields' config must have the same number of elements as 'headers' config`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.PostgresURL = "postgres://unused"
			if tc.compile != "" {
				if _, err := NewRouter(cfg); err == nil || !strings.Contains(err.Error(), tc.compile) {
					t.Fatalf("NewRouter = %v; want an error saying %q", err, tc.compile)
				}
				return
			}
			e := tc.event
			if e == nil {
				e = trRow()
			}
			_, err := fixedRouter(t, cfg, outboxColumns()...).Route(t.Context(), e)
			var ee *connector.EventError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Route = %v; want an event error saying %q", err, tc.err)
			}
		})
	}
}

// TestTransformTombstone: RecordIsTombstone.java tests record.value() ==
// null, which the router's tombstone (route.tombstone.on.empty.payload)
// is, and so is a NULL payload without it (a null value with a schema).
func TestTransformTombstone(t *testing.T) {
	drop := []Transform{{Name: "f", Type: "Filter", Predicate: "t"}}
	ps := []Predicate{{Name: "t", Type: "RecordIsTombstone"}}
	for _, tombstones := range []bool{true, false} {
		cfg := RouterConfig{ValueFormat: FormatJSONSchema, TombstoneOnEmptyPayload: tombstones, Transforms: drop, Predicates: ps}
		m, err := fixedRouter(t, cfg, outboxColumns()...).Route(t.Context(), outboxRow(connector.Column{Name: "payload", Null: true}))
		if err != nil || !m.Filtered {
			t.Errorf("tombstones %t: a NULL payload: filtered %t, %v; want it filtered", tombstones, m.Filtered, err)
		}
	}
}

// TestInsertHeaderJSON: with JsonConverter as the header converter the
// literal's Connect type shows (Values.parseString: 42 is an INT8, 1.5 a
// FLOAT32, 70000 an INT32, text a string).
func TestInsertHeaderJSON(t *testing.T) {
	var ts []Transform
	for i, lit := range []string{"42", "1.5", "70000", "a:b", ""} {
		ts = append(ts, Transform{Name: string(rune('a' + i)), Type: "InsertHeader", Options: opts("header", string(rune('a'+i)), "value.literal", lit)})
	}
	cfg := RouterConfig{ValueFormat: FormatJSON, HeaderFormat: FormatJSONSchema, Transforms: ts}
	m, err := fixedRouter(t, cfg, outboxColumns()...).Route(t.Context(), trRow())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range m.Headers[1:] {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := []string{
		`a={"schema":{"type":"int8","optional":false},"payload":42}`,
		`b={"schema":{"type":"float","optional":false},"payload":1.5}`,
		`c={"schema":{"type":"int32","optional":false},"payload":70000}`,
		`d={"schema":{"type":"string","optional":false},"payload":"a:b"}`,
		`e={"schema":{"type":"string","optional":false},"payload":""}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("headers\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
