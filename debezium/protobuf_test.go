package debezium

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestProtobufFromConnect checks the .proto registered for each kind of
// schema the router makes against ProtobufData.fromConnectSchema
// (confluentinc/schema-registry protobuf-converter/src/main/java/io/
// confluent/connect/protobuf/ProtobufData.java) and the text
// ProtobufSchemaUtils.toString writes of it (protobuf-provider/src/main/
// java/io/confluent/kafka/schemaregistry/protobuf/ProtobufSchemaUtils.java).
// The rules each fixture shows:
//   - descriptorFromConnectSchema: a root that is not a struct is the
//     google.protobuf wrapper of its type (STRING: StringValue), whose
//     file, wrappers.proto, is the schema; its message index is the
//     wrapper's place in that file (StringValue: 7).
//   - A root struct: splitName of its name (getNameOrDefault:
//     ConnectDefault1 when it has none) at the last dot is the package and
//     the message; syntax proto3 (rawSchemaFromConnectSchema).
//   - messageDefinitionFromConnectSchema: fields numbered from 1 in
//     order; dataTypeFromConnectSchema: INT8/INT16/INT32 int32, INT64
//     int64, FLOAT32 float, FLOAT64 double, BOOLEAN bool, STRING string,
//     BYTES bytes (no wrappers for optional fields:
//     wrapper.for.nullables=false; no "optional" label:
//     optional.for.nullables=false); INT8 and INT16 put connect.type in
//     the field's confluent.field_meta params; Debezium's names
//     (io.debezium.*) are not Connect logical types and leave no trace.
//   - An ARRAY is a repeated field of its items; a STRUCT field's type is
//     the unqualified struct name, with "Message" added when that is the
//     field's name, defined as a message nested in the field's message.
//   - toProtoFile: proto3 fields print no label but repeated, and no
//     default (ratio's 1.5 and priority's 5 are not in the text).
//   - toString: "syntax", "package", an empty line, the message; a message
//     writes its fields, then an empty line and its nested messages,
//     appendIndented; an option map is written key: value, a line each
//     (ProtobufSchema.toOption puts a Meta's params as a list of
//     {key, value} maps; logical-types/src/test/resources/schema/proto/
//     all_simple_types.proto shows the same text for connect.type int16).
func TestProtobufFromConnect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		s     *Schema
		want  string
		index []int
	}{
		{"key column", convKey, wrappersProto, []int{7}},
		{"jsonb payload", convPayload, wrappersProto, []int{7}},
		{"bigint key", &Schema{Type: TypeInt64}, wrappersProto, []int{2}},
		{"envelope", convEnvelope, `syntax = "proto3";
package dbserver1.inventory.outboxevent.Order;

message Value {
  string payload = 1;
  string eventType = 2;
  int32 priority = 3 [(confluent.field_meta) = {
    params: [
      {
        key: "connect.type",
        value: "int16"
      }
    ]
  }];
  int64 created = 4;
  string at = 5;
  bool ok = 6;
  bytes blob = 7;
  double ratio = 8;
}
`, []int{0}},
		{"expanded payload", convExpanded, `syntax = "proto3";

message payload {
  int32 seq = 1;
  customerMessage customer = 2;
  repeated linesMessage lines = 3;
  repeated int64 tags = 4;

  message customerMessage {
    string name = 1;
  }
  message linesMessage {
    string sku = 1;
    int32 qty = 2;
  }
}
`, []int{0}},
		{"unnamed structs", &Schema{Type: TypeStruct, Fields: []Field{{Name: "a", Schema: &Schema{Type: TypeStruct, Optional: true, Fields: []Field{{Name: "b", Schema: &Schema{Type: TypeStruct, Optional: true}}}}}}}, `syntax = "proto3";

message ConnectDefault1 {
  ConnectDefault2 a = 1;

  message ConnectDefault2 {
    ConnectDefault3 b = 1;
  
    message ConnectDefault3 {}
  }
}
`, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := protoPlanOf(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if p.text != tc.want {
				t.Errorf("schema\n got %s\nwant %s", p.text, tc.want)
			}
			if len(p.index) != len(tc.index) || p.index[0] != tc.index[0] {
				t.Errorf("message index %v, want %v", p.index, tc.index)
			}
		})
	}
	// The wrappers' order is the file's own.
	md := wrapperspb.File_google_protobuf_wrappers_proto.Messages()
	for i, n := range protoWrappers {
		if string(md.Get(i).Name()) != n {
			t.Errorf("wrapper %d is %s in wrappers.proto, not %s", i, md.Get(i).Name(), n)
		}
	}
	for _, bad := range []*Schema{
		{Type: TypeStruct, Name: "my-server.public.outbox.Order.Value", Fields: []Field{{Name: "a", Schema: optString}}},
		{Type: TypeStruct, Name: "payload", Fields: []Field{{Name: "my-key", Schema: optString}}},
		{Type: TypeArray, Items: optString},
		{Type: TypeStruct, Name: "payload", Fields: []Field{{Name: "x", Schema: &Schema{Type: TypeStruct, Optional: true, Name: "x.payload"}}}},
	} {
		if _, err := protoPlanOf(bad); err == nil {
			t.Errorf("%+v: no error; ProtobufData fails on it", bad)
		}
	}
}

// envelopeDescriptor is the fixture's envelope message, built by hand,
// which decodes the records independently of the encoder.
func envelopeDescriptor(t *testing.T) *dynamicpb.Message {
	t.Helper()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("envelope.proto"), Package: proto.String("dbserver1.inventory.outboxevent.Order"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Value"), Field: []*descriptorpb.FieldDescriptorProto{
			field("payload", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING),
			field("eventType", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING),
			field("priority", 3, descriptorpb.FieldDescriptorProto_TYPE_INT32),
			field("created", 4, descriptorpb.FieldDescriptorProto_TYPE_INT64),
			field("at", 5, descriptorpb.FieldDescriptorProto_TYPE_STRING),
			field("ok", 6, descriptorpb.FieldDescriptorProto_TYPE_BOOL),
			field("blob", 7, descriptorpb.FieldDescriptorProto_TYPE_BYTES),
			field("ratio", 8, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
		}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dynamicpb.NewMessage(fd.Messages().Get(0))
}

// TestProtobufRecords: the record is the DynamicMessage ProtobufData
// builds (fromConnectData): a field's null takes its default (Struct.get),
// a null without one is left unset, and proto3 leaves out a scalar at its
// default; a root that is not a struct is its wrapper message; a null
// value is a null record whatever its schema (fromConnectData returns
// null, ProtobufConverter writes null).
func TestProtobufRecords(t *testing.T) {
	f := protobufFormat{}
	env := &Struct{Schema: convEnvelope, Values: []any{`{"a": 1}`, "OrderCreated", nil, int64(1556890294484000), nil, true, []byte{1, 2}, nil}}
	plan, err := f.parse("", convEnvelope)
	if err != nil {
		t.Fatal(err)
	}
	index, body, err := f.encode(plan, convEnvelope, env)
	if err != nil {
		t.Fatal(err)
	}
	m := envelopeDescriptor(t)
	if err := proto.Unmarshal(body, m); err != nil {
		t.Fatalf("decode %x: %v", body, err)
	}
	got, _ := protojson.MarshalOptions{}.Marshal(m)
	want := `{"payload":"{\"a\": 1}","eventType":"OrderCreated","priority":5,"created":"1556890294484000","ok":true,"blob":"AQI=","ratio":1.5}`
	if string(compactJSON(got)) != want || len(index) != 1 || index[0] != 0 {
		t.Errorf("envelope %s, index %v\nwant %s, [0]", got, index, want)
	}

	plan, _ = f.parse("", convKey)
	index, body, err = f.encode(plan, convKey, "o-1")
	var sv wrapperspb.StringValue
	if err != nil || proto.Unmarshal(body, &sv) != nil || sv.Value != "o-1" || index[0] != 7 {
		t.Errorf("key: %x %v %v, want a StringValue o-1 at index 7", body, index, err)
	}
	// An empty string is StringValue's default: no field at all.
	if _, body, _ = f.encode(plan, convKey, ""); len(body) != 0 {
		t.Errorf("empty key %x, want no bytes", body)
	}
	if !f.null(convPayload, nil) || !f.null(&Schema{Type: TypeString, Default: "x"}, nil) || f.null(convKey, "x") {
		t.Error("null records: want a null value, and only it, written as null")
	}
}

// compactJSON drops the spaces protojson puts at random.
func compactJSON(b []byte) []byte {
	out := b[:0:0]
	inString := false
	for i, c := range b {
		switch {
		case c == '"' && (i == 0 || b[i-1] != '\\'):
			inString = !inString
		case !inString && c == ' ':
			continue
		}
		out = append(out, c)
	}
	return out
}
