package debezium

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"
)

// The .proto of a Connect schema is the one Confluent's ProtobufConverter
// registers: ProtobufData.fromConnectSchema (confluentinc/schema-registry,
// protobuf-converter/src/main/java/io/confluent/connect/protobuf/
// ProtobufData.java) with its defaults (no wrappers or optional labels for
// nullable fields, names not scrubbed, proto3), turned into a
// ProtoFileElement (ProtobufSchema.toProtoFile, protobuf-provider/.../
// protobuf/ProtobufSchema.java) and written by ProtobufSchemaUtils.toString
// (protobuf-provider/.../protobuf/ProtobufSchemaUtils.java), which is the
// schema's canonicalString. A struct is a message in the package its name
// gives; any other root is a google.protobuf wrapper message, the schema
// being wrappers.proto. The rules it follows are cited beside the fixtures
// in protobuf_test.go.

// protobufFormat is Confluent's ProtobufConverter as a [schemaFormat].
type protobufFormat struct{}

func (protobufFormat) name() string              { return "Protobuf" }
func (protobufFormat) schemaType() sr.SchemaType { return sr.TypeProtobuf }

// recordName is ProtobufSchema.name(): the first message's full name,
// which for a named struct is its Connect name.
func (protobufFormat) recordName(s *Schema) string { return s.Name }

// null: ProtobufData.fromConnectData returns null for a null value, which
// ProtobufConverter writes as a null record, whatever the schema.
func (protobufFormat) null(_ *Schema, v any) bool { return v == nil }

func (protobufFormat) derive(s *Schema) (string, error) {
	p, err := protoPlanOf(s)
	if err != nil {
		return "", err
	}
	return p.text, nil
}

// parse plans the encoding from the Connect schema the text was derived
// from: use_latest_version, which would write with another text, is
// refused with protobuf (RouterConfig.compile).
func (protobufFormat) parse(_ string, s *Schema) (any, error) {
	return protoPlanOf(s)
}

func (protobufFormat) encode(parsed any, s *Schema, v any) ([]int, []byte, error) {
	p := parsed.(*protoPlan)
	if p.root == nil {
		// A wrapper: field 1, value, left out when it is the default, as
		// proto3 leaves out every scalar at its default.
		b, err := appendProtoScalar(nil, 1, s.Type, v)
		return p.index, b, err
	}
	st, ok := v.(*Struct)
	if !ok {
		return nil, nil, fmt.Errorf("a %T value for a struct schema", v)
	}
	b, err := appendProtoMessage(nil, p.root, st)
	return p.index, b, err
}

// protoPlan is a derived schema: its text, the message indexes of the
// record's message, and the message (nil for a wrapper).
type protoPlan struct {
	text  string
	index []int
	root  *protoMessage
}

// protoMessage is a message MessageDefinition builds from a struct.
type protoMessage struct {
	name   string
	schema *Schema
	fields []protoField
	nested []*protoMessage
}

// protoField is a field of a message; for an array, schema is its
// items' and repeated is set.
type protoField struct {
	name        string
	tag         int
	typ         string
	repeated    bool
	connectType string // the connect.type parameter in confluent.field_meta
	schema      *Schema
	msg         *protoMessage
}

// protoWrappers are the messages of google/protobuf/wrappers.proto in its
// order, which is their message index, and wrappersProto is that file as
// ProtobufSchemaUtils.toString writes the descriptor protobuf-java embeds
// (ProtobufSchema.toProtoFile: the options it knows, in its order; no
// comments).
var protoWrappers = []string{"DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value", "BoolValue", "StringValue", "BytesValue"}

const wrappersProto = `syntax = "proto3";
package google.protobuf;

option java_package = "com.google.protobuf";
option java_outer_classname = "WrappersProto";
option java_multiple_files = true;
option go_package = "google.golang.org/protobuf/types/known/wrapperspb";
option cc_enable_arenas = true;
option objc_class_prefix = "GPB";
option csharp_namespace = "Google.Protobuf.WellKnownTypes";

message DoubleValue {
  double value = 1;
}
message FloatValue {
  float value = 1;
}
message Int64Value {
  int64 value = 1;
}
message UInt64Value {
  uint64 value = 1;
}
message Int32Value {
  int32 value = 1;
}
message UInt32Value {
  uint32 value = 1;
}
message BoolValue {
  bool value = 1;
}
message StringValue {
  string value = 1;
}
message BytesValue {
  bytes value = 1;
}
`

// protoWrapper is descriptorFromConnectSchema's wrapper for a root that
// is not a struct.
func protoWrapper(t Type) string {
	switch t {
	case TypeInt8, TypeInt16, TypeInt32:
		return "Int32Value"
	case TypeInt64:
		return "Int64Value"
	case TypeFloat32:
		return "FloatValue"
	case TypeFloat64:
		return "DoubleValue"
	case TypeBoolean:
		return "BoolValue"
	case TypeString:
		return "StringValue"
	case TypeBytes:
		return "BytesValue"
	}
	return ""
}

// connectLogicalNames are Connect's logical types, which ProtobufData
// writes as confluent.type, google.type and google.protobuf messages; the
// router places them only with decimal.handling.mode precise and
// time.precision.mode connect, which Router.Check refuses with protobuf
// (tablecheck.go). Debezium's own time types are plain numbers and strings.
var connectLogicalNames = map[string]bool{
	"org.apache.kafka.connect.data.Date":      true,
	"org.apache.kafka.connect.data.Time":      true,
	"org.apache.kafka.connect.data.Timestamp": true,
	"org.apache.kafka.connect.data.Decimal":   true,
}

func protoPlanOf(s *Schema) (*protoPlan, error) {
	if s.Type != TypeStruct {
		w := protoWrapper(s.Type)
		if w == "" {
			// descriptorFromConnectSchema: "Unsupported root schema".
			return nil, fmt.Errorf("ProtobufData cannot write a root %s (unsupported root schema)", s.Type)
		}
		for i, n := range protoWrappers {
			if n == w {
				return &protoPlan{text: wrappersProto, index: []int{i}}, nil
			}
		}
	}
	b := protoBuilder{}
	// fromConnectSchema: getNameOrDefault, then splitName at the last dot
	// into the package and the message's name.
	full := b.nameOrDefault(s.Name)
	pkg, name := "", full
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		pkg, name = full[:i], full[i+1:]
	}
	if pkg != "" {
		for _, part := range strings.Split(pkg, ".") {
			if err := protoIdent("package", part, full); err != nil {
				return nil, err
			}
		}
	}
	root, err := b.message(name, s)
	if err != nil {
		return nil, err
	}
	var t strings.Builder
	t.WriteString("syntax = \"proto3\";\n")
	if pkg != "" {
		t.WriteString("package " + pkg + ";\n")
	}
	t.WriteString("\n")
	t.WriteString(root.text())
	return &protoPlan{text: t.String(), index: []int{0}, root: root}, nil
}

// protoBuilder keeps FromConnectContext's counter of unnamed structs,
// named ConnectDefault1, 2, ... in the order the derivation meets them.
type protoBuilder struct{ unnamed int }

func (b *protoBuilder) nameOrDefault(name string) string {
	if name != "" {
		return name
	}
	b.unnamed++
	return "ConnectDefault" + strconv.Itoa(b.unnamed)
}

// protoIdent is Descriptors' validateSymbolName, which fails the
// descriptor (ProtobufData's scrub.invalid.names is off by default).
func protoIdent(what, name, in string) error {
	ok := name != ""
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%s name %q (of %q) is not a Protobuf identifier, which ProtobufConverter fails on too (scrub.invalid.names is off by default)", what, name, in)
	}
	return nil
}

// message is messageDefinitionFromConnectSchema: the fields in order,
// numbered from 1; a struct field's message nested in this one, once per
// type name.
func (b *protoBuilder) message(name string, s *Schema) (*protoMessage, error) {
	if err := protoIdent("message", name, s.Name); err != nil {
		return nil, err
	}
	m := &protoMessage{name: name, schema: s}
	defined := map[string]*protoMessage{}
	for i, f := range s.Fields {
		if err := protoIdent("field", f.Name, f.Name); err != nil {
			return nil, err
		}
		pf := protoField{name: f.Name, tag: i + 1, schema: f.Schema}
		fs := f.Schema
		if fs.Type == TypeArray {
			pf.repeated = true
			fs = fs.Items
			pf.schema = fs
		}
		if connectLogicalNames[fs.Name] {
			return nil, fmt.Errorf("field %q: Connect's %s is not written as Protobuf", f.Name, fs.Name)
		}
		switch fs.Type {
		case TypeInt8:
			pf.typ, pf.connectType = "int32", "int8"
		case TypeInt16:
			pf.typ, pf.connectType = "int32", "int16"
		case TypeInt32:
			pf.typ = "int32"
		case TypeInt64:
			pf.typ = "int64"
		case TypeFloat32:
			pf.typ = "float"
		case TypeFloat64:
			pf.typ = "double"
		case TypeBoolean:
			pf.typ = "bool"
		case TypeString:
			pf.typ = "string"
		case TypeBytes:
			pf.typ = "bytes"
		case TypeArray:
			return nil, fmt.Errorf("field %q is an array of arrays, which ProtobufData cannot write (\"Array cannot be nested\")", f.Name)
		case TypeStruct:
			// getUnqualifiedName, with "Message" added when it is the
			// field's own name.
			full := b.nameOrDefault(fs.Name)
			typ := full[strings.LastIndexByte(full, '.')+1:]
			if typ == f.Name {
				typ += "Message"
			}
			pf.typ = typ
			if typ == name {
				// FromConnectContext.contains takes a type named as the
				// enclosing message for that message, so the field would be
				// written with the enclosing message's fields, not its own.
				return nil, fmt.Errorf("field %q: its struct's type name %s is the name of the message it is in, which ProtobufData takes for that message", f.Name, typ)
			}
			if prev, ok := defined[typ]; ok {
				if !prev.schema.equal(fs) {
					return nil, fmt.Errorf("fields of message %s give two different structs the type name %s, which ProtobufData defines once", name, typ)
				}
				pf.msg = prev
				break
			}
			nm, err := b.message(typ, fs)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			defined[typ] = nm
			m.nested = append(m.nested, nm)
			pf.msg = nm
		default:
			return nil, fmt.Errorf("field %q: no Protobuf type for a Connect %s", f.Name, fs.Type)
		}
		m.fields = append(m.fields, pf)
	}
	// A field and a nested message share the message's scope, where
	// Descriptors refuses a name defined twice.
	for _, f := range m.fields {
		if _, ok := defined[f.name]; ok {
			return nil, fmt.Errorf("message %s has a field and a nested message both named %s, which Protobuf refuses", name, f.name)
		}
	}
	return m, nil
}

// text is ProtobufSchemaUtils.toString of the message: its fields, then
// its nested messages, each block after an empty line and indented by
// appendIndented.
func (m *protoMessage) text() string {
	var b strings.Builder
	b.WriteString("message " + m.name + " {")
	if len(m.fields) > 0 {
		b.WriteByte('\n')
		for _, f := range m.fields {
			protoIndent(&b, f.text())
		}
	}
	if len(m.nested) > 0 {
		b.WriteByte('\n')
		for _, n := range m.nested {
			protoIndent(&b, n.text())
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// text is a field's line; the connect.type parameter is the field's
// (confluent.field_meta) option, a Meta message written as an option map
// (ProtobufSchema.toOption, ProtobufSchemaUtils.formatOptionMap).
func (f *protoField) text() string {
	var b strings.Builder
	if f.repeated {
		b.WriteString("repeated ")
	}
	b.WriteString(f.typ + " " + f.name + " = " + strconv.Itoa(f.tag))
	if f.connectType != "" {
		b.WriteString(" [(confluent.field_meta) = {\n  params: [\n    {\n      key: \"connect.type\",\n      value: \"" + f.connectType + "\"\n    }\n  ]\n}]")
	}
	b.WriteString(";\n")
	return b.String()
}

// protoIndent is appendIndented: each line of s (Java's split, which
// drops trailing empty lines) after two spaces.
func protoIndent(b *strings.Builder, s string) {
	lines := strings.Split(s, "\n")
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
}

// appendProtoMessage writes st as the DynamicMessage ProtobufData builds:
// each field's value (Struct.get: its default for a null) unless null,
// in field number order; proto3 leaves scalars at their default out, an
// empty list is null, and repeated numbers are packed.
func appendProtoMessage(b []byte, m *protoMessage, st *Struct) ([]byte, error) {
	for i, f := range m.fields {
		v := st.Values[i]
		fs := m.schema.Fields[i].Schema
		if v == nil {
			v = fs.Default
		}
		if v == nil {
			continue
		}
		var err error
		if f.repeated {
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("field %q: a %T for an array", f.name, v)
			}
			b, err = appendProtoList(b, f, list)
		} else {
			b, err = appendProtoValue(b, f, v)
		}
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.name, err)
		}
	}
	return b, nil
}

func appendProtoValue(b []byte, f protoField, v any) ([]byte, error) {
	if f.msg != nil {
		st, ok := v.(*Struct)
		if !ok {
			return nil, fmt.Errorf("a %T for a struct", v)
		}
		body, err := appendProtoMessage(nil, f.msg, st)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, protowire.Number(f.tag), protowire.BytesType)
		return protowire.AppendBytes(b, body), nil
	}
	return appendProtoScalar(b, f.tag, f.schema.Type, v)
}

func appendProtoList(b []byte, f protoField, list []any) ([]byte, error) {
	if len(list) == 0 {
		return b, nil
	}
	for _, e := range list {
		if e == nil {
			// DynamicMessage refuses a null element.
			return nil, errors.New("a null element in an array, which Protobuf cannot hold")
		}
	}
	switch f.schema.Type {
	case TypeString, TypeBytes, TypeStruct:
		var err error
		for _, e := range list {
			if f.msg != nil {
				b, err = appendProtoValue(b, f, e)
			} else {
				b, err = appendProtoBytes(b, f.tag, e, true)
			}
			if err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	var packed []byte
	for _, e := range list {
		var err error
		if packed, err = appendProtoNumber(packed, f.schema.Type, e); err != nil {
			return nil, err
		}
	}
	b = protowire.AppendTag(b, protowire.Number(f.tag), protowire.BytesType)
	return protowire.AppendBytes(b, packed), nil
}

// appendProtoScalar writes one scalar field, left out at its default.
func appendProtoScalar(b []byte, tag int, t Type, v any) ([]byte, error) {
	if t == TypeString || t == TypeBytes {
		return appendProtoBytes(b, tag, v, false)
	}
	if protoZero(v) {
		return b, nil
	}
	var wt protowire.Type
	switch t {
	case TypeFloat32:
		wt = protowire.Fixed32Type
	case TypeFloat64:
		wt = protowire.Fixed64Type
	default:
		wt = protowire.VarintType
	}
	b = protowire.AppendTag(b, protowire.Number(tag), wt)
	return appendProtoNumber(b, t, v)
}

func protoZero(v any) bool {
	switch x := v.(type) {
	case int64:
		return x == 0
	case bool:
		return !x
	case float32:
		return math.Float32bits(x) == 0
	case float64:
		return math.Float64bits(x) == 0
	}
	return false
}

// appendProtoNumber writes a number's bytes without a tag: int32 and
// int64 as varints (a negative int32 sign-extended to ten bytes), float
// and double little endian.
func appendProtoNumber(b []byte, t Type, v any) ([]byte, error) {
	switch x := v.(type) {
	case int64:
		switch t {
		case TypeInt8, TypeInt16, TypeInt32:
			return protowire.AppendVarint(b, uint64(int64(int32(x)))), nil
		case TypeInt64:
			return protowire.AppendVarint(b, uint64(x)), nil
		}
	case bool:
		if t == TypeBoolean {
			return protowire.AppendVarint(b, protowire.EncodeBool(x)), nil
		}
	case float32:
		if t == TypeFloat32 {
			return protowire.AppendFixed32(b, math.Float32bits(x)), nil
		}
	case float64:
		if t == TypeFloat64 {
			return protowire.AppendFixed64(b, math.Float64bits(x)), nil
		}
	}
	return nil, fmt.Errorf("a %T value for a Connect %s", v, t)
}

// appendProtoBytes writes a string or bytes field; an element of a list
// is written even when empty.
func appendProtoBytes(b []byte, tag int, v any, always bool) ([]byte, error) {
	var body []byte
	switch x := v.(type) {
	case string:
		body = []byte(x)
	case []byte:
		body = x
	default:
		return nil, fmt.Errorf("a %T value for a string or bytes field", v)
	}
	if len(body) == 0 && !always {
		return b, nil
	}
	b = protowire.AppendTag(b, protowire.Number(tag), protowire.BytesType)
	return protowire.AppendBytes(b, body), nil
}
