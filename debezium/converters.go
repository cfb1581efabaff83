package debezium

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Format is how a record's key, value or headers are written: as the
// column's bytes (raw, outboxrelay's own format) or as one of Kafka
// Connect's converters writes a Debezium record.
type Format string

const (
	// FormatRaw writes the column as stored: the text of text-like
	// columns, the bytes of bytea. outboxrelay's default.
	FormatRaw Format = "raw"
	// FormatString is org.apache.kafka.connect.storage.StringConverter.
	FormatString Format = "string"
	// FormatJSON is org.apache.kafka.connect.json.JsonConverter with
	// schemas.enable=false.
	FormatJSON Format = "json"
	// FormatJSONSchema is JsonConverter with schemas.enable=true: the
	// {"schema":...,"payload":...} envelope.
	FormatJSONSchema Format = "json+schema"
	// FormatBytes is org.apache.kafka.connect.converters.ByteArrayConverter,
	// and Debezium's pass-through converters BinaryDataConverter and
	// ByteBufferConverter (its name before Debezium 2.0): a bytes column
	// goes out as its bytes, unchanged. A value that is not bytes is an
	// error, unless a delegate format writes it ([passThrough]).
	FormatBytes Format = "bytes"
	// FormatAvro is Confluent's io.confluent.connect.avro.AvroConverter
	// (and Apicurio's io.apicurio.registry.utils.converter.AvroConverter
	// with its Confluent-compatible settings): the Avro schema derived from
	// the Connect schema is registered in a Schema Registry and the record
	// is written in the Confluent wire format (avro.go, registry.go).
	FormatAvro Format = "avro"
	// FormatJSONSR is Confluent's io.confluent.connect.json.JsonSchemaConverter:
	// the JSON Schema JsonSchemaData derives from the Connect schema is
	// registered (schemaType JSON), and the record is its JSON in the
	// Confluent wire format (jsonschema.go). ksqlDB calls it JSON_SR.
	FormatJSONSR Format = "json_sr"
	// FormatProtobuf is Confluent's io.confluent.connect.protobuf.ProtobufConverter:
	// the .proto ProtobufData derives is registered (schemaType PROTOBUF),
	// and the record is the message in the Confluent wire format, message
	// indexes included (protobuf.go).
	FormatProtobuf Format = "protobuf"
	// FormatSimple is org.apache.kafka.connect.storage.SimpleHeaderConverter,
	// Kafka Connect's default header converter; headers only.
	FormatSimple Format = "simple"
)

// ValueFormats are the formats a key or value can have.
var ValueFormats = []Format{FormatRaw, FormatString, FormatJSON, FormatJSONSchema, FormatBytes, FormatAvro, FormatJSONSR, FormatProtobuf}

// UsesRegistry reports whether f registers its schemas in the Schema
// Registry: avro, json_sr, protobuf.
func (f Format) UsesRegistry() bool { return registryFormat(f) != nil }

// registryFormat is the [schemaFormat] of a format that registers its
// schemas in the Schema Registry, or nil.
func registryFormat(f Format) schemaFormat {
	switch f {
	case FormatAvro:
		return avroFormat{}
	case FormatJSONSR:
		return jsonSRFormat{}
	case FormatProtobuf:
		return protobufFormat{}
	}
	return nil
}

// DelegateFormats are the formats that can write, for FormatBytes, a key or
// value that is not bytes: the converters Debezium's pass-through
// converters can delegate to (delegate.converter.type).
var DelegateFormats = []Format{FormatString, FormatJSON, FormatJSONSchema}

// HeaderFormats are the formats headers can have.
var HeaderFormats = []Format{FormatRaw, FormatSimple, FormatJSON, FormatJSONSchema}

// structured reports whether f can write a struct (envelope fields, an
// expanded payload).
func (f Format) structured() bool {
	return f == FormatString || f == FormatJSON || f == FormatJSONSchema || registryFormat(f) != nil
}

// convert writes v, of schema s, as the key or value converter f does.
// A nil schema with a nil value is a tombstone: every converter writes
// null.
func convert(f Format, s *Schema, v any) ([]byte, error) {
	if s == nil && v == nil {
		return nil, nil
	}
	switch f {
	case FormatJSON, FormatJSONSchema:
		return jsonConvert(f == FormatJSONSchema, s, v)
	case FormatString:
		if v == nil {
			return nil, nil
		}
		str, err := javaToString(v)
		if err != nil {
			return nil, err
		}
		return []byte(str), nil
	case FormatBytes:
		if s != nil && s.Type != TypeBytes {
			return nil, fmt.Errorf("ByteArrayConverter and BinaryDataConverter without a delegate.converter.type accept only bytes, and this is a %s (Kafka Connect fails with \"Invalid schema type for ByteArrayConverter\"); use a bytea column, a delegate format or another converter", s.Type)
		}
		if v == nil {
			return nil, nil
		}
		b, ok := v.([]byte)
		if !ok {
			return nil, fmt.Errorf("ByteArrayConverter accepts only bytes, not %T", v)
		}
		return b, nil
	}
	return nil, fmt.Errorf("format %q cannot convert a typed value", f)
}

// passThrough writes v, of schema s, as Debezium's BinaryDataConverter
// does with delegate.converter.type naming the delegate format (empty for
// none). Its fromConnectData (debezium-connect-plugins, formerly
// debezium-core, io/debezium/converters/BinaryDataConverter.java):
//   - a schema that is not BYTES goes to the delegate, whatever the value,
//     null included;
//   - otherwise a byte[] or ByteBuffer value is returned unchanged (a
//     ByteBuffer's array(), which for the ByteBuffer.wrap of Debezium's
//     JdbcValueConverters.toByteBuffer is the column's bytes);
//   - another non-null value goes to the delegate, and null stays null;
//   - without a delegate, what would go to it is a DataException ("A
//     schema of type ... requires a delegate.converter.type to be
//     configured", assertDelegateProvided).
//
// ByteBufferConverter.fromConnectData (debezium-core, removed in 2.0)
// follows the same rules for a ByteBuffer value, which is what Debezium's
// PostgreSQL connector gives a bytea column. Without a delegate this is
// what ByteArrayConverter writes, so both are [FormatBytes].
func passThrough(delegate Format, s *Schema, v any) ([]byte, error) {
	_, isBytes := v.([]byte)
	if delegate != "" && ((s != nil && s.Type != TypeBytes) || (v != nil && !isBytes)) {
		return convert(delegate, s, v)
	}
	return convert(FormatBytes, s, v)
}

// convertHeader writes a header value as the header converter f does.
func convertHeader(f Format, s *Schema, v any) ([]byte, error) {
	switch f {
	case FormatSimple:
		if v == nil {
			return nil, nil
		}
		var b strings.Builder
		if err := appendConnectString(&b, v, false); err != nil {
			return nil, err
		}
		return []byte(b.String()), nil
	case FormatJSON, FormatJSONSchema:
		return jsonConvert(f == FormatJSONSchema, s, v)
	}
	return nil, fmt.Errorf("format %q cannot convert a header", f)
}

// jsonConvert is JsonConverter.fromConnectData.
func jsonConvert(schemas bool, s *Schema, v any) ([]byte, error) {
	if s == nil && v == nil {
		return nil, nil
	}
	var b []byte
	var err error
	if schemas {
		b = append(b, `{"schema":`...)
		b = appendSchemaJSON(b, s, "")
		b = append(b, `,"payload":`...)
		if b, err = appendValueJSON(b, s, v); err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	}
	return appendValueJSON(b, s, v)
}

// appendSchemaJSON writes s as JsonConverter.asJsonSchema, in its field
// order: type, fields or items, optional, name, version, doc, parameters,
// default, and for a struct's field, field last.
func appendSchemaJSON(b []byte, s *Schema, field string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"type":"`...)
	b = append(b, s.Type.String()...)
	b = append(b, '"')
	switch s.Type {
	case TypeStruct:
		b = append(b, `,"fields":[`...)
		for i, f := range s.Fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendSchemaJSON(b, f.Schema, f.Name)
		}
		b = append(b, ']')
	case TypeArray:
		b = append(b, `,"items":`...)
		b = appendSchemaJSON(b, s.Items, "")
	}
	b = append(b, `,"optional":`...)
	b = strconv.AppendBool(b, s.Optional)
	if s.Name != "" {
		b = append(b, `,"name":`...)
		b = appendJacksonString(b, s.Name)
	}
	if s.Version != 0 {
		b = append(b, `,"version":`...)
		b = strconv.AppendInt(b, int64(s.Version), 10)
	}
	if s.Doc != "" {
		b = append(b, `,"doc":`...)
		b = appendJacksonString(b, s.Doc)
	}
	if len(s.Params) > 0 {
		b = append(b, `,"parameters":{`...)
		for i, p := range s.Params {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJacksonString(b, p.Key)
			b = append(b, ':')
			b = appendJacksonString(b, p.Value)
		}
		b = append(b, '}')
	}
	if s.Default != nil {
		b = append(b, `,"default":`...)
		// A default is a valid value of its schema by construction.
		b, _ = appendValueJSON(b, s, s.Default)
	}
	if field != "" {
		b = append(b, `,"field":`...)
		b = appendJacksonString(b, field)
	}
	return append(b, '}')
}

// appendValueJSON writes v as JsonConverter.convertToJson does: a null
// takes the schema's default (replace.null.with.default, on by default).
func appendValueJSON(b []byte, s *Schema, v any) ([]byte, error) {
	if v == nil {
		switch {
		case s == nil || (s.Default == nil && s.Optional):
			return append(b, "null"...), nil
		case s.Default != nil:
			v = s.Default
		default:
			return nil, fmt.Errorf("null value for a required %s (JsonConverter: \"null value for field that is required and has no default value\")", s.Type)
		}
	}
	switch x := v.(type) {
	case string:
		return appendJacksonString(b, validUTF8(x)), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case javaDate:
		// JsonConverter's LOGICAL_CONVERTERS write a Connect Date, Time
		// or Timestamp as the number its fromLogical gives.
		n, err := connectNumber(s.Name, x)
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(b, n, 10), nil
	case float32:
		return appendJSONFloat(b, javaFloat(x)), nil
	case float64:
		return appendJSONFloat(b, javaDouble(x)), nil
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, '"'), nil
	case javaDecimal:
		// TO_JSON_LOGICAL_CONVERTERS with decimal.format BASE64, the
		// default: Decimal.fromLogical's bytes, as any bytes.
		return appendValueJSON(b, s, x.bytes())
	case *Struct:
		b = append(b, '{')
		for i, f := range x.Schema.Fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJacksonString(b, f.Name)
			b = append(b, ':')
			var err error
			if b, err = appendValueJSON(b, f.Schema, x.Values[i]); err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
		}
		return append(b, '}'), nil
	case []any:
		var items *Schema
		if s != nil {
			items = s.Items
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValueJSON(b, items, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	return nil, fmt.Errorf("cannot write a %T as JSON", v)
}

// appendJSONFloat writes a Java-formatted number; Jackson writes the
// non-numbers NaN and Infinity as strings (WRITE_NAN_AS_STRINGS).
func appendJSONFloat(b []byte, s string) []byte {
	switch s {
	case "NaN", "Infinity", "-Infinity":
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	return append(b, s...)
}

// javaToString is Java's toString of a Connect value, which is what
// StringConverter writes: Struct{field=value,...} for a struct (null
// fields left out), [a, b] for a list.
func javaToString(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "null", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case javaDate:
		return javaDateString(x), nil
	case javaDecimal:
		return x.String(), nil
	case float32:
		return javaFloat(x), nil
	case float64:
		return javaDouble(x), nil
	case []byte:
		return "", fmt.Errorf("StringConverter writes Java's object name for binary data (\"[B@...\"), not the bytes; use ByteArrayConverter or JsonConverter for a bytea column")
	case *Struct:
		if x.Schema.Name == nameVariableScaleDecimal {
			return "", fmt.Errorf("StringConverter writes a VariableScaleDecimal (a numeric without precision, decimal.handling.mode precise) as Struct{scale=...,value=[B@...}, the bytes as Java's object name; set decimal.handling.mode string or double (routing.decimal_handling), give the column a precision, or use JsonConverter")
		}
		var b strings.Builder
		b.WriteString("Struct{")
		first := true
		for i, f := range x.Schema.Fields {
			if x.Values[i] == nil {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			s, err := javaToString(x.Values[i])
			if err != nil {
				return "", err
			}
			b.WriteString(f.Name)
			b.WriteByte('=')
			b.WriteString(s)
		}
		b.WriteByte('}')
		return b.String(), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := javaToString(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	}
	return "", fmt.Errorf("cannot write a %T as a string", v)
}

// appendConnectString is Kafka Connect's Values.convertToString, which
// SimpleHeaderConverter writes: strings as they are, numbers and booleans
// as Java prints them, bytes in base64, lists and structs as JSON-like
// text in which only quotes and backslashes are escaped.
func appendConnectString(b *strings.Builder, v any, embedded bool) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case string:
		if embedded {
			b.WriteByte('"')
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(x, `\`, `\\`), `"`, `\"`))
			b.WriteByte('"')
		} else {
			b.WriteString(x)
		}
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case javaDate:
		b.WriteString(connectDateString(x))
	case javaDecimal:
		// Values.append: a Number is written by its toString, unquoted.
		b.WriteString(x.String())
	case float32:
		b.WriteString(javaFloat(x))
	case float64:
		b.WriteString(javaDouble(x))
	case []byte:
		if embedded {
			b.WriteByte('"')
		}
		b.WriteString(base64.StdEncoding.EncodeToString(x))
		if embedded {
			b.WriteByte('"')
		}
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := appendConnectString(b, e, true); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case *Struct:
		b.WriteByte('{')
		for i, f := range x.Schema.Fields {
			if i > 0 {
				b.WriteByte(',')
			}
			_ = appendConnectString(b, f.Name, true)
			b.WriteByte(':')
			if err := appendConnectString(b, x.Values[i], true); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("cannot write a %T as a header", v)
	}
	return nil
}
