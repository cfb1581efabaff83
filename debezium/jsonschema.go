package debezium

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
)

// The JSON Schema of a Connect schema is the one Confluent's
// JsonSchemaConverter registers: JsonSchemaData.fromConnectSchema
// (confluentinc/schema-registry, json-schema-converter/src/main/java/io/
// confluent/connect/json/JsonSchemaData.java, rawSchemaFromConnectSchema)
// with its defaults (object.additional.properties=true, so no
// "additionalProperties"; generalized sum types off), built as everit
// schemas, written by everit's ToStringVisitor (everit-org/json-schema,
// core/src/main/java/org/everit/json/schema/ToStringVisitor.java), read
// back and written again by Jackson (JsonSchema(Schema) and
// canonicalString, json-schema-provider/.../json/JsonSchema.java): compact
// JSON, keys in the order everit wrote them. The rules it follows are
// cited beside the fixtures in jsonschema_test.go.

// jsonSRFormat is Confluent's JsonSchemaConverter as a [schemaFormat].
type jsonSRFormat struct{}

func (jsonSRFormat) name() string              { return "JSON Schema" }
func (jsonSRFormat) schemaType() sr.SchemaType { return sr.TypeJSON }
func (jsonSRFormat) recordName(s *Schema) string {
	// RecordNameStrategy takes JsonSchema.name(), the schema's title,
	// which JsonSchemaData sets to the struct's name.
	return s.Name
}

// null: JsonSchemaConverter.fromConnectData returns null for a null
// schema and value; JsonSchemaData.fromConnectData gives Java null (which
// the serializer writes as a null record) for a null of a required schema
// without a default, but a JSON null, a record of its own with the schema
// registered, for a null of an optional one.
func (jsonSRFormat) null(s *Schema, v any) bool {
	return v == nil && (s == nil || (!s.Optional && s.Default == nil))
}

func (jsonSRFormat) derive(s *Schema) (string, error) {
	w := jsonSchemaWriter{}
	if err := w.schema(s, -1); err != nil {
		return "", err
	}
	return string(w.b), nil
}

// parse checks only that the text is JSON: the record's JSON does not
// depend on the schema, and the serializer's validation against it is off
// by default (json.fail.invalid.schema=false).
func (jsonSRFormat) parse(text string, _ *Schema) (any, error) {
	if !json.Valid([]byte(text)) {
		return nil, errors.New("the schema is not JSON")
	}
	return nil, nil
}

// encode writes JsonSchemaData.fromConnectData's JSON as the serializer's
// Jackson does: a struct's fields in order, a null field as null, bytes in
// base64, which is also what JsonConverter without schemas writes.
func (jsonSRFormat) encode(_ any, s *Schema, v any) ([]int, []byte, error) {
	b, err := appendValueJSON(nil, s, v)
	return nil, b, err
}

// jsonSchemaWriter writes the JSON Schema text.
type jsonSchemaWriter struct{ b []byte }

// prop is one of the properties JsonSchemaData puts in an everit schema's
// unprocessedProperties (connect.type, connect.version, connect.index).
type prop struct {
	key   string
	value string // JSON
}

// props writes the unprocessed properties in the order of everit's copy
// of the HashMap JsonSchemaData put them in, in the order given
// (javahash.go).
func (w *jsonSchemaWriter) props(ps []prop) {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.key
	}
	for _, k := range javaCopyOrder(keys) {
		for _, p := range ps {
			if p.key == k {
				w.b = append(w.b, ',')
				w.b = appendJacksonString(w.b, k)
				w.b = append(w.b, ':')
				w.b = append(w.b, p.value...)
			}
		}
	}
}

// jsonConnectType is the connect.type JsonSchemaData records for the
// Connect types JSON Schema cannot tell apart, and the JSON Schema type.
func jsonConnectType(t Type) (jsonType, connectType string) {
	switch t {
	case TypeInt8:
		return "integer", "int8"
	case TypeInt16:
		return "integer", "int16"
	case TypeInt32:
		return "integer", "int32"
	case TypeInt64:
		return "integer", "int64"
	case TypeFloat32:
		return "number", "float32"
	case TypeFloat64:
		return "number", "float64"
	case TypeBoolean:
		return "boolean", ""
	case TypeString:
		return "string", ""
	case TypeBytes:
		return "string", "bytes"
	}
	return "", ""
}

// schema writes rawSchemaFromConnectSchema(s, index): index is the
// field's position in its struct (connect.index), -1 for none.
func (w *jsonSchemaWriter) schema(s *Schema, index int) error {
	indexProp := func(ps []prop) []prop {
		if index >= 0 {
			ps = append(ps, prop{"connect.index", strconv.Itoa(index)})
		}
		return ps
	}
	if s.Optional {
		// An optional schema is a oneOf of null and the schema made
		// required (CombinedSchema ONE_CRITERION); connect.index goes to
		// the oneOf. ToStringVisitor.visitCombinedSchema writes the
		// combined schema's own properties, then "oneOf".
		w.b = append(w.b, '{')
		mark := len(w.b)
		w.props(indexProp(nil))
		if len(w.b) > mark {
			// props wrote a leading comma.
			w.b = append(w.b[:mark], w.b[mark+1:]...)
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, `"oneOf":[{"type":"null"},`...)
		required := *s
		required.Optional = false
		if err := w.base(&required, nil); err != nil {
			return err
		}
		w.b = append(w.b, "]}"...)
		return nil
	}
	return w.base(s, indexProp(nil))
}

// base writes a required schema: its type keyword where ToStringVisitor
// writes it, then visitSchema's title, default and properties, then the
// properties of a struct or the items of an array. extra are the
// properties beside the schema's own (connect.index).
func (w *jsonSchemaWriter) base(s *Schema, extra []prop) error {
	ps := append(schemaProps(s), extra...)
	switch s.Type {
	case TypeStruct:
		w.b = append(w.b, `{"type":"object"`...)
		if err := w.common(s, ps); err != nil {
			return err
		}
		if err := w.properties(s); err != nil {
			return err
		}
		w.b = append(w.b, '}')
		return nil
	case TypeArray:
		w.b = append(w.b, `{"type":"array"`...)
		if err := w.common(s, ps); err != nil {
			return err
		}
		w.b = append(w.b, `,"items":`...)
		if err := w.schema(s.Items, -1); err != nil {
			return err
		}
		w.b = append(w.b, '}')
		return nil
	case TypeBoolean:
		// visitBooleanSchema writes visitSchema's part first, "type" last.
		w.b = append(w.b, '{')
		mark := len(w.b)
		if err := w.common(s, ps); err != nil {
			return err
		}
		if len(w.b) > mark {
			w.b = append(w.b[:mark], w.b[mark+1:]...)
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, `"type":"boolean"}`...)
		return nil
	}
	jt, _ := jsonConnectType(s.Type)
	if jt == "" {
		return fmt.Errorf("no JSON Schema type for a Connect %s", s.Type)
	}
	w.b = append(w.b, `{"type":`...)
	w.b = strconv.AppendQuote(w.b, jt)
	if err := w.common(s, ps); err != nil {
		return err
	}
	w.b = append(w.b, '}')
	return nil
}

// schemaProps are the unprocessed properties JsonSchemaData gives s:
// connect.type, connect.version and connect.parameters.
func schemaProps(s *Schema) []prop {
	var ps []prop
	_, ct := jsonConnectType(s.Type)
	if ct != "" {
		ps = append(ps, prop{"connect.type", strconv.Quote(ct)})
	}
	if s.Version != 0 {
		ps = append(ps, prop{"connect.version", strconv.Itoa(s.Version)})
	}
	if len(s.Params) > 0 {
		// connect.parameters is a HashMap of the parameters (those not
		// under io.confluent.connect.json, which the router never sets),
		// which org.json copies into a JSONObject to write it.
		keys := make([]string, len(s.Params))
		for i, p := range s.Params {
			keys[i] = p.Key
		}
		obj := []byte{'{'}
		for i, k := range javaSizedOrder(keys) {
			if i > 0 {
				obj = append(obj, ',')
			}
			obj = appendJacksonString(obj, k)
			obj = append(obj, ':')
			obj = appendJacksonString(obj, s.param(k))
		}
		ps = append(ps, prop{"connect.parameters", string(append(obj, '}'))})
	}
	return ps
}

// common writes visitSchema's part: title (the Connect name), description
// (its doc), default, then the unprocessed properties ps, each after a
// comma.
func (w *jsonSchemaWriter) common(s *Schema, ps []prop) error {
	if s.Name != "" {
		w.b = append(w.b, `,"title":`...)
		w.b = appendJacksonString(w.b, s.Name)
	}
	if s.Doc != "" {
		w.b = append(w.b, `,"description":`...)
		w.b = appendJacksonString(w.b, s.Doc)
	}
	if s.Default != nil {
		w.b = append(w.b, `,"default":`...)
		var err error
		if w.b, err = appendJSONSchemaDefault(w.b, s.Default); err != nil {
			return err
		}
	}
	w.props(ps)
	return nil
}

// properties writes a struct's fields as an object's "properties", in
// the order of the HashMap ObjectSchema.Builder put them in, which the
// ObjectSchema keeps; none when it has no fields.
func (w *jsonSchemaWriter) properties(s *Schema) error {
	if len(s.Fields) == 0 {
		return nil
	}
	names := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		names[i] = f.Name
	}
	w.b = append(w.b, `,"properties":{`...)
	for i, name := range javaPutOrder(names) {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		fi := s.field(name)
		w.b = appendJacksonString(w.b, name)
		w.b = append(w.b, ':')
		if err := w.schema(s.Fields[fi].Schema, fi); err != nil {
			return fmt.Errorf("field %q: %w", name, err)
		}
	}
	w.b = append(w.b, '}')
	return nil
}

// appendJSONSchemaDefault writes a default as it comes out of everit and
// Jackson: JsonSchemaData.toJsonSchemaValue gives everit the Java value,
// org.json writes it (a number by JSONObject.numberToString: Java's
// toString, trailing fractional zeros dropped), and Jackson reads it back
// with USE_BIG_DECIMAL_FOR_FLOATS and writes it again (a fraction as
// BigDecimal.toString). Bytes are their base64 text (BinaryNode.asText).
func appendJSONSchemaDefault(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return appendJacksonString(b, validUTF8(x)), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("default %s is not a JSON number (org.json refuses it)", javaFloat(x))
		}
		return append(b, jacksonDecimal(javaFloat(x))...), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("default %s is not a JSON number (org.json refuses it)", javaDouble(x))
		}
		return append(b, jacksonDecimal(javaDouble(x))...), nil
	case []byte:
		return appendJacksonString(b, base64.StdEncoding.EncodeToString(x)), nil
	case javaDecimal:
		// fromConnectData with decimal.format BASE64: a BinaryNode of
		// Decimal.fromLogical's bytes, whose text is their base64.
		return appendJSONSchemaDefault(b, x.bytes())
	}
	return nil, fmt.Errorf("cannot write a %T default in a JSON Schema", v)
}

// jacksonDecimal turns Java's text of a float into what org.json and then
// Jackson make of it: org.json drops trailing fractional zeros ("1.0" is
// 1, an integer to Jackson); a number with a fraction or an exponent is
// a BigDecimal, written by BigDecimal.toString (plain unless the scale is
// negative or the adjusted exponent is under -6, else d.dddE+n).
func jacksonDecimal(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp, hasExp := strings.Cut(s, "E")
	if !hasExp {
		if strings.Contains(mant, ".") {
			mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
		}
		if neg && mant != "0" {
			return "-" + mant
		}
		return mant
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		digits = "0"
	}
	e, _ := strconv.Atoi(exp)
	scale := len(frac) - e
	adjusted := -scale + len(digits) - 1
	var out string
	if scale >= 0 && adjusted >= -6 {
		if scale == 0 {
			out = digits
		} else {
			if len(digits) <= scale {
				digits = strings.Repeat("0", scale-len(digits)+1) + digits
			}
			out = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		out += "E"
		if adjusted > 0 {
			out += "+"
		}
		out += strconv.Itoa(adjusted)
	}
	if neg {
		return "-" + out
	}
	return out
}
