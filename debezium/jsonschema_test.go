package debezium

import (
	"testing"
)

// Schemas the router makes, shared by the JSON Schema and Protobuf
// fixtures: an envelope (a required struct named after the topic prefix,
// table and route-by value, with a version from
// table.field.event.schema.version), the key column, a jsonb payload, and
// an expanded payload (optional structs named by their path, arrays).
var (
	convEnvelope = &Schema{Type: TypeStruct, Name: "dbserver1.inventory.outboxevent.Order.Value", Version: 3, Fields: []Field{
		{Name: "payload", Schema: &Schema{Type: TypeString, Optional: true, Name: nameJSON, Version: 1}},
		{Name: "eventType", Schema: &Schema{Type: TypeString}},
		{Name: "priority", Schema: &Schema{Type: TypeInt16, Default: int64(5)}},
		{Name: "created", Schema: &Schema{Type: TypeInt64, Name: nameMicroTimestamp, Version: 1}},
		{Name: "at", Schema: &Schema{Type: TypeString, Optional: true, Name: nameZonedTimestamp, Version: 1}},
		{Name: "ok", Schema: &Schema{Type: TypeBoolean, Optional: true}},
		{Name: "blob", Schema: &Schema{Type: TypeBytes, Optional: true}},
		{Name: "ratio", Schema: &Schema{Type: TypeFloat64, Default: 1.5}},
	}}
	convKey      = &Schema{Type: TypeString}
	convPayload  = &Schema{Type: TypeString, Optional: true, Name: nameJSON, Version: 1}
	convLine     = &Schema{Type: TypeStruct, Optional: true, Name: "payload.lines", Fields: []Field{{Name: "sku", Schema: optString}, {Name: "qty", Schema: optInt32}}}
	convExpanded = &Schema{Type: TypeStruct, Optional: true, Name: "payload", Fields: []Field{
		{Name: "seq", Schema: optInt32},
		{Name: "customer", Schema: &Schema{Type: TypeStruct, Optional: true, Name: "payload.customer", Fields: []Field{{Name: "name", Schema: optString}}}},
		{Name: "lines", Schema: &Schema{Type: TypeArray, Optional: true, Items: convLine}},
		{Name: "tags", Schema: &Schema{Type: TypeArray, Optional: true, Items: optInt64}},
	}}
)

// TestJSONSchemaFromConnect checks the JSON Schema registered for each
// kind of schema the router makes against JsonSchemaData.fromConnectSchema
// (confluentinc/schema-registry json-schema-converter/src/main/java/io/
// confluent/connect/json/JsonSchemaData.java, rawSchemaFromConnectSchema),
// written by everit's ToStringVisitor and re-written by Jackson
// (JsonSchema(Schema), canonicalString). The rules each fixture shows:
//   - INT8..INT64 are NumberSchema requiresInteger ("type":"integer"),
//     FLOAT32/64 requiresInteger(false) ("number"), BYTES a StringSchema,
//     each with connect.type int8..int64, float32, float64, bytes; STRING
//     and BOOLEAN have no connect.type.
//   - The Connect name is the everit title, the version connect.version,
//     a field's position connect.index, the default everit's default.
//   - An optional schema (not a struct) is a CombinedSchema ONE_CRITERION
//     of NullSchema and the schema, connect.index moved to the oneOf; an
//     optional struct is the oneOf of null and nonOptional(schema).
//   - object.additional.properties=true (JsonSchemaDataConfig default):
//     no "additionalProperties".
//   - ToStringVisitor: a NumberSchema, StringSchema, ObjectSchema or
//     ArraySchema writes "type" first, then visitSchema (title,
//     description, nullable, default, readOnly, writeOnly, id, the
//     unprocessed properties), then "properties" or "items"; a
//     BooleanSchema writes visitSchema first and "type" last; a
//     CombinedSchema its own properties, then "oneOf".
//   - An object's properties are in the order of the HashMap
//     ObjectSchema.Builder.addPropertySchema puts them in, which the
//     ObjectSchema constructor keeps uncopied (everit-json-schema 1.14.6,
//     core/src/main/java/org/everit/json/schema/ObjectSchema.java, the
//     version confluentinc/schema-registry's pom.xml pins as
//     json-schema.version); the unprocessed properties in the order of
//     JsonSchemaData's HashMap as Schema's constructor copies it
//     (new HashMap<>(builder.unprocessedProperties), Schema.java);
//     connect.parameters' members as org.json's JSONObject(Map) copies
//     the Collectors.toMap HashMap to write it (JSONWriter.valueToString,
//     JSONObject.java at 20250107): javahash.go, checked against the JDK
//     by javahash_jdk_test.go.
//   - Jackson writes a float default read as a BigDecimal (1.5), an
//     integer as written (5).
//
// Every fixture here was checked once against that code itself, built
// from source and run on OpenJDK 17 (schema-registry v8.3.1, everit
// 1.14.6, org.json 20250107, Kafka 3.8.0's connect/api): each is the
// canonicalString() Confluent gives for the same Connect schema, byte for
// byte. The Java build is not part of the suite, which has no registry
// to fetch those jars from.
func TestJSONSchemaFromConnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *Schema
		want string
	}{
		{"key column", convKey, `{"type":"string"}`},
		{"jsonb payload", convPayload, `{"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]}`},
		{"envelope", convEnvelope, `{"type":"object","title":"dbserver1.inventory.outboxevent.Order.Value","connect.version":3,"properties":{` +
			`"at":{"connect.index":4,"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.time.ZonedTimestamp","connect.version":1}]},` +
			`"blob":{"connect.index":6,"oneOf":[{"type":"null"},{"type":"string","connect.type":"bytes"}]},` +
			`"payload":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]},` +
			`"created":{"type":"integer","title":"io.debezium.time.MicroTimestamp","connect.index":3,"connect.version":1,"connect.type":"int64"},` +
			`"eventType":{"type":"string","connect.index":1},` +
			`"priority":{"type":"integer","default":5,"connect.index":2,"connect.type":"int16"},` +
			`"ok":{"connect.index":5,"oneOf":[{"type":"null"},{"type":"boolean"}]},` +
			`"ratio":{"type":"number","default":1.5,"connect.index":7,"connect.type":"float64"}}}`},
		{"expanded payload", convExpanded, `{"oneOf":[{"type":"null"},{"type":"object","title":"payload","properties":{` +
			`"lines":{"connect.index":2,"oneOf":[{"type":"null"},{"type":"array","items":{"oneOf":[{"type":"null"},{"type":"object","title":"payload.lines","properties":{` +
			`"qty":{"connect.index":1,"oneOf":[{"type":"null"},{"type":"integer","connect.type":"int32"}]},` +
			`"sku":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string"}]}}}]}}]},` +
			`"seq":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"integer","connect.type":"int32"}]},` +
			`"customer":{"connect.index":1,"oneOf":[{"type":"null"},{"type":"object","title":"payload.customer","properties":{"name":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string"}]}}}]},` +
			`"tags":{"connect.index":3,"oneOf":[{"type":"null"},{"type":"array","items":{"oneOf":[{"type":"null"},{"type":"integer","connect.type":"int64"}]}}]}}}]}`},
		// Envelopes of few fields, where a copied map's smaller table
		// would order them otherwise: "payload" and "type" (a table of 4
		// would put type first), and payload, eventType, aggregateid
		// (aggregateid's bucket comes first in a table of 16).
		{"envelope of two fields", envelopeOf("type", &Schema{Type: TypeString}), `{"type":"object","title":"dbserver1.inventory.outboxevent.Order.Value","properties":{` +
			`"payload":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]},` +
			`"type":{"type":"string","connect.index":1}}}`},
		{"envelope of three fields", envelopeOf("eventType", &Schema{Type: TypeString}, "aggregateid", &Schema{Type: TypeString}), `{"type":"object","title":"dbserver1.inventory.outboxevent.Order.Value","properties":{` +
			`"aggregateid":{"type":"string","connect.index":2},` +
			`"payload":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]},` +
			`"eventType":{"type":"string","connect.index":1}}}`},
		// An expanded {} is a struct without fields: ToStringVisitor
		// leaves out an empty "properties".
		{"empty object", &Schema{Type: TypeStruct, Name: "payload"}, `{"type":"object","title":"payload"}`},
		{"boolean key", &Schema{Type: TypeBoolean, Name: "n"}, `{"title":"n","type":"boolean"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jsonSRFormat{}.derive(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("schema\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestJSONSchemaRecords: the record is JsonSchemaData.fromConnectData's
// JSON (a struct's fields in order, null fields as null, bytes in
// base64, a null's default); a null of an optional schema is a JSON null
// with the schema registered (fromConnectData gives a NullNode, which the
// serializer writes), one of a required schema without a default is a
// null record (fromConnectData gives Java null, and
// AbstractKafkaJsonSchemaSerializer.serializeImpl returns null for it),
// as is a tombstone (JsonSchemaConverter.fromConnectData: null schema and
// value).
func TestJSONSchemaRecords(t *testing.T) {
	f := jsonSRFormat{}
	env := &Struct{Schema: convEnvelope, Values: []any{`{"a": 1}`, "OrderCreated", nil, int64(1556890294484000), nil, true, []byte{1, 2}, nil}}
	for _, tc := range []struct {
		name string
		s    *Schema
		v    any
		null bool
		want string
	}{
		{"envelope", convEnvelope, env, false, `{"payload":"{\"a\": 1}","eventType":"OrderCreated","priority":5,"created":1556890294484000,"at":null,"ok":true,"blob":"AQI=","ratio":1.5}`},
		{"key", convKey, "o-1", false, `"o-1"`},
		{"null payload", convPayload, nil, false, `null`},
		{"null of a required schema", convKey, nil, true, ""},
		{"tombstone", nil, nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.null(tc.s, tc.v); got != tc.null {
				t.Fatalf("null record %t, want %t", got, tc.null)
			}
			if tc.null {
				return
			}
			_, b, err := f.encode(nil, tc.s, tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("record\n got %s\nwant %s", b, tc.want)
			}
		})
	}
}

// envelopeOf is the envelope struct of a jsonb payload and the given
// fields, name and schema in turn.
func envelopeOf(fields ...any) *Schema {
	s := &Schema{Type: TypeStruct, Name: "dbserver1.inventory.outboxevent.Order.Value", Fields: []Field{{Name: "payload", Schema: convPayload}}}
	for i := 0; i < len(fields); i += 2 {
		s.Fields = append(s.Fields, Field{Name: fields[i].(string), Schema: fields[i+1].(*Schema)})
	}
	return s
}
