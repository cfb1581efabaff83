package debezium

import (
	"testing"

	"github.com/hamba/avro/v2"
)

// TestAvroSchemaMapping checks avroSchema against what Confluent's
// AvroData.fromConnectSchema (confluentinc/schema-registry,
// avro-data/src/main/java/io/confluent/connect/avro/AvroData.java) makes of
// Connect schemas the end-to-end fixtures (avro_test.go) do not reach, each
// fact cited beside its case, and that hamba/avro parses every result.
func TestAvroSchemaMapping(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *Schema
		want string
	}{
		// CONNECT_TYPES_TO_AVRO_TYPES: FLOAT32 float, FLOAT64 double,
		// BOOLEAN boolean, INT64 long; a schema without name, version or
		// default is the bare type name.
		{"float", &Schema{Type: TypeFloat32}, `"float"`},
		{"double", &Schema{Type: TypeFloat64}, `"double"`},
		{"boolean", &Schema{Type: TypeBoolean}, `"boolean"`},
		{"long", &Schema{Type: TypeInt64}, `"long"`},
		// case INT8: intType with CONNECT_TYPE_PROP "int8".
		{"int8", &Schema{Type: TypeInt8}, `{"type":"int","connect.type":"int8"}`},
		// An optional schema with a default: unionOf().type(baseSchema)
		// .and().nullType(), T first; the default as connect.default
		// (defaultValueFromConnect: a number node).
		{"optional with default", &Schema{Type: TypeInt32, Optional: true, Default: int64(5)},
			`[{"type":"int","connect.default":5},"null"]`},
		// A float default is a FloatNode or DoubleNode, which Jackson
		// writes as Java's Float.toString or Double.toString: 0.0, 1.0E7.
		{"optional double with default", &Schema{Type: TypeFloat64, Optional: true, Default: float64(0)},
			`[{"type":"double","connect.default":0.0},"null"]`},
		{"float default in Java notation", &Schema{Type: TypeFloat32, Default: float32(1e7)},
			`{"type":"float","connect.default":1.0E7}`},
		// A struct without a name: createRecord(DEFAULT_SCHEMA_NAME,
		// NAMESPACE), io.confluent.connect.avro.ConnectDefault, and no
		// connect.name (it is added only when schema.name() != null). A
		// field with a default: addAvroRecordField's defaultVal.
		{"unnamed struct", &Schema{Type: TypeStruct, Fields: []Field{
			{Name: "a", Schema: &Schema{Type: TypeString, Default: "x"}},
			{Name: "b", Schema: &Schema{Type: TypeBytes, Optional: true}},
		}}, `{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[` +
			`{"name":"a","type":{"type":"string","connect.default":"x"},"default":"x"},` +
			`{"name":"b","type":["null","bytes"],"default":null}]}`},
		// A name without a dot: splitName gives a null namespace.
		{"struct named without a dot", &Schema{Type: TypeStruct, Name: "payload", Version: 2, Fields: []Field{
			{Name: "n", Schema: &Schema{Type: TypeInt16, Optional: true}},
		}}, `{"type":"record","name":"payload","fields":[{"name":"n","type":["null",{"type":"int","connect.type":"int16"}],"default":null}],"connect.version":2,"connect.name":"payload"}`},
		// An array of required items: items not a union.
		{"array", &Schema{Type: TypeArray, Items: &Schema{Type: TypeString}}, `{"type":"array","items":"string"}`},
		// Connect's Timestamp: LogicalTypes.timestampMillis().addToSchema
		// after the connect.* properties.
		{"Connect Timestamp", &Schema{Type: TypeInt64, Name: "org.apache.kafka.connect.data.Timestamp", Version: 1},
			`{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}`},
		{"Connect Date", &Schema{Type: TypeInt32, Name: "org.apache.kafka.connect.data.Date", Version: 1},
			`{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Date","logicalType":"date"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := avroSchema(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if _, err := avro.ParseWithCache(got, "", &avro.SchemaCache{}); err != nil {
				t.Errorf("hamba/avro does not parse it: %v", err)
			}
		})
	}
}
