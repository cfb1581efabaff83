package debezium

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// The Avro schema of a Connect schema is the one Confluent's AvroConverter
// registers: AvroData.fromConnectSchema (confluentinc/schema-registry,
// avro-data/src/main/java/io/confluent/connect/avro/AvroData.java) with its
// defaults (connect.meta.data=true, enhanced.avro.schema.support=false),
// written in the order Avro's Schema.toString writes it, since that string
// is what the converter registers. The facts it relies on are cited beside
// the fixtures in avro_test.go.
const (
	// avroNamespace and avroDefaultName name a struct schema that has no
	// name (AvroData.NAMESPACE, DEFAULT_SCHEMA_NAME).
	avroNamespace   = "io.confluent.connect.avro"
	avroDefaultName = "ConnectDefault"
)

// avroFormat is Confluent's AvroConverter as a [schemaFormat].
type avroFormat struct{}

func (avroFormat) name() string              { return "Avro" }
func (avroFormat) schemaType() sr.SchemaType { return sr.TypeAvro }
func (avroFormat) derive(s *Schema) (string, error) {
	return avroSchema(s)
}
func (avroFormat) recordName(s *Schema) string { return avroFullName(s) }

// null: AvroConverter writes a null value as a null record
// (AbstractKafkaAvroSerializer returns null for a null object), and Struct
// .get gives a null's default first.
func (avroFormat) null(s *Schema, v any) bool {
	return v == nil && (s == nil || (s.Optional && s.Default == nil))
}

// parse uses a cache of its own for each schema: the shared one would
// hold the first definition of a record name, and an expanded payload's
// records change shape from event to event.
func (avroFormat) parse(text string, _ *Schema) (any, error) {
	return avro.ParseWithCache(text, "", &avro.SchemaCache{})
}

func (avroFormat) encode(parsed any, s *Schema, v any) ([]int, []byte, error) {
	as := parsed.(avro.Schema)
	native, err := avroValue(as, s, v)
	if err != nil {
		return nil, nil, err
	}
	b, err := avro.Marshal(as, native)
	return nil, b, err
}

// avroSchema returns the Avro schema text for s.
func avroSchema(s *Schema) (string, error) {
	w := avroWriter{}
	if err := w.schema(s, false); err != nil {
		return "", err
	}
	return string(w.b), nil
}

// avroWriter writes Avro schema JSON. space is the enclosing namespace,
// as Avro's Names.space while it writes a named schema's fields.
type avroWriter struct {
	b     []byte
	space *string
	// defined are the records written so far, by full name.
	defined map[string]bool
}

func (w *avroWriter) str(s string) {
	b, _ := json.Marshal(s)
	w.b = append(w.b, b...)
}

// schema writes fromConnectSchema(s, ignoreOptional): an optional schema
// is a union with null, null first unless the schema has a default.
func (w *avroWriter) schema(s *Schema, ignoreOptional bool) error {
	if s.Optional && !ignoreOptional {
		if s.Type == TypeStruct {
			// An optional struct is [null, the struct made required],
			// whatever its default, and carries no properties itself.
			w.b = append(w.b, `["null",`...)
			if err := w.schema(s, true); err != nil {
				return err
			}
			w.b = append(w.b, ']')
			return nil
		}
		if s.Default != nil {
			w.b = append(w.b, '[')
			if err := w.base(s); err != nil {
				return err
			}
			w.b = append(w.b, `,"null"]`...)
			return nil
		}
		w.b = append(w.b, `["null",`...)
		if err := w.base(s); err != nil {
			return err
		}
		w.b = append(w.b, ']')
		return nil
	}
	return w.base(s)
}

// avroLogicalTypes are the Avro logical types of Connect's logical types.
// Debezium's Decimal has connect.decimal.precision, so its scale is within
// it and LogicalTypes.decimal adds only the logicalType (precision and
// scale are among its connect parameters already). Debezium's own time
// types (io.debezium.time.*) are not among them: they stay named
// primitives.
var avroLogicalTypes = map[string]string{
	nameDecimal: "decimal",
	"org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
	"org.apache.kafka.connect.data.Date":      "date",
	"org.apache.kafka.connect.data.Time":      "time-millis",
}

// avroType is the Avro primitive type of a Connect type, and the
// connect.type property that keeps INT8 and INT16 apart from INT32.
func avroType(t Type) (name, connectType string) {
	switch t {
	case TypeInt8:
		return "int", "int8"
	case TypeInt16:
		return "int", "int16"
	case TypeInt32:
		return "int", ""
	case TypeInt64:
		return "long", ""
	case TypeFloat32:
		return "float", ""
	case TypeFloat64:
		return "double", ""
	case TypeBoolean:
		return "boolean", ""
	case TypeString:
		return "string", ""
	case TypeBytes:
		return "bytes", ""
	}
	return "", ""
}

// base writes the schema without its optionality: a primitive, an array
// or a record, with the connect.* properties.
func (w *avroWriter) base(s *Schema) error {
	switch s.Type {
	case TypeArray:
		w.b = append(w.b, `{"type":"array","items":`...)
		if err := w.schema(s.Items, false); err != nil {
			return err
		}
		if err := w.props(s); err != nil {
			return err
		}
		w.b = append(w.b, '}')
		return nil
	case TypeStruct:
		return w.record(s)
	}
	name, ct := avroType(s.Type)
	if name == "" {
		return fmt.Errorf("no Avro type for a Connect %s", s.Type)
	}
	if s.Version == 0 && s.Default == nil && s.Name == "" && ct == "" {
		w.str(name)
		return nil
	}
	w.b = append(w.b, `{"type":`...)
	w.str(name)
	if s.Name == nameDecimal {
		// fromConnectSchema's BYTES case adds scale and precision before
		// the connect.* properties.
		scale, precision := s.param("scale"), s.param("connect.decimal.precision")
		w.b = append(w.b, `,"scale":`...)
		w.b = append(w.b, scale...)
		w.b = append(w.b, `,"precision":`...)
		w.b = append(w.b, precision...)
	}
	if err := w.props(s); err != nil {
		return err
	}
	w.b = append(w.b, '}')
	return nil
}

// props writes the connect.* properties of s, and the logicalType of
// Connect's logical types.
func (w *avroWriter) props(s *Schema) error {
	if s.Doc != "" {
		w.b = append(w.b, `,"connect.doc":`...)
		w.str(s.Doc)
	}
	if s.Version != 0 {
		w.b = append(w.b, `,"connect.version":`...)
		w.b = strconv.AppendInt(w.b, int64(s.Version), 10)
	}
	if len(s.Params) > 0 {
		w.b = append(w.b, `,"connect.parameters":{`...)
		for i, p := range s.Params {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(p.Key)
			w.b = append(w.b, ':')
			w.str(p.Value)
		}
		w.b = append(w.b, '}')
	}
	if s.Default != nil {
		w.b = append(w.b, `,"connect.default":`...)
		if err := w.defaultValue(s, s.Default); err != nil {
			return err
		}
	}
	if s.Name != "" {
		w.b = append(w.b, `,"connect.name":`...)
		w.str(s.Name)
	}
	if _, ct := avroType(s.Type); ct != "" {
		w.b = append(w.b, `,"connect.type":`...)
		w.str(ct)
	}
	// Connect's logical types, by name: LogicalTypes...addToSchema
	// adds logicalType after the connect.* properties.
	if lt := avroLogicalTypes[s.Name]; lt != "" {
		w.b = append(w.b, `,"logicalType":`...)
		w.str(lt)
	}
	return nil
}

// record writes a struct as an Avro record, or as a reference to the
// record of its name written before.
func (w *avroWriter) record(s *Schema) error {
	space, name := avroSplitName(s.Name)
	full := avroFullName(s)
	if w.defined[full] {
		// A struct of a name written before (two VariableScaleDecimal
		// columns): fromConnectSchemaWithCycle reuses the record of
		// that name (cycleReferences), and Schema.toString writes it
		// again as a reference, its name qualified unless its
		// namespace is the enclosing one (writeNameRef).
		if space != nil && w.space != nil && *space == *w.space {
			w.str(name)
		} else {
			w.str(full)
		}
		return nil
	}
	if w.defined == nil {
		w.defined = map[string]bool{}
	}
	w.defined[full] = true
	w.b = append(w.b, `{"type":"record","name":`...)
	w.str(name)
	// Schema.Name.writeName: the namespace only where it differs from
	// the enclosing one; a null one inside a non-null one is "".
	switch {
	case space != nil && (w.space == nil || *space != *w.space):
		w.b = append(w.b, `,"namespace":`...)
		w.str(*space)
	case space == nil && w.space != nil:
		w.b = append(w.b, `,"namespace":""`...)
	}
	saved := w.space
	w.space = space
	w.b = append(w.b, `,"fields":[`...)
	for i, f := range s.Fields {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		if err := w.field(f); err != nil {
			return err
		}
	}
	w.b = append(w.b, ']')
	w.space = saved
	if err := w.props(s); err != nil {
		return err
	}
	w.b = append(w.b, '}')
	return nil
}

// field writes one field of a record.
func (w *avroWriter) field(f Field) error {
	w.b = append(w.b, `{"name":`...)
	w.str(f.Name)
	w.b = append(w.b, `,"type":`...)
	if err := w.schema(f.Schema, false); err != nil {
		return err
	}
	// addAvroRecordField: the field's default is its schema's
	// default, else null when the schema is optional.
	switch {
	case f.Schema.Default != nil:
		w.b = append(w.b, `,"default":`...)
		if err := w.defaultValue(f.Schema, f.Schema.Default); err != nil {
			return err
		}
	case f.Schema.Optional:
		w.b = append(w.b, `,"default":null`...)
	}
	w.b = append(w.b, '}')
	return nil
}

// defaultValue writes a default as AvroData.defaultValueFromConnect: a
// number, boolean or string as such (a float in Java's form), bytes as an
// ISO-8859-1 string.
func (w *avroWriter) defaultValue(s *Schema, v any) error {
	switch x := v.(type) {
	case string:
		w.str(x)
	case bool:
		w.b = strconv.AppendBool(w.b, x)
	case int64:
		w.b = strconv.AppendInt(w.b, x, 10)
	case javaDate:
		// defaultValueFromConnect writes a logical date as the number
		// Date, Time or Timestamp.fromLogical gives.
		n, err := connectNumber(s.Name, x)
		if err != nil {
			return err
		}
		w.b = strconv.AppendInt(w.b, n, 10)
	case float32:
		// A FloatNode or DoubleNode, which Jackson writes as Java's
		// Float.toString or Double.toString (0.0, 1.0E7), NaN quoted.
		w.b = appendJSONFloat(w.b, javaFloat(x))
	case float64:
		w.b = appendJSONFloat(w.b, javaDouble(x))
	case javaDecimal:
		// toAvroLogical gives Decimal.fromLogical's bytes, written as
		// any bytes.
		return w.defaultValue(s, x.bytes())
	case []byte:
		r := make([]rune, len(x))
		for i, c := range x {
			r[i] = rune(c)
		}
		w.str(string(r))
	default:
		return fmt.Errorf("cannot write a %T default of a %s in an Avro schema", v, s.Type)
	}
	return nil
}

// avroSplitName is AvroData.splitName: the namespace before the last dot
// (nil when there is none) and the name after it; an unnamed struct is
// io.confluent.connect.avro.ConnectDefault.
func avroSplitName(full string) (space *string, name string) {
	if full == "" {
		ns := avroNamespace
		return &ns, avroDefaultName
	}
	i := strings.LastIndexByte(full, '.')
	if i < 0 {
		return nil, full
	}
	ns := full[:i]
	return &ns, full[i+1:]
}

// avroFullName is the full name of s's Avro schema as a union names its
// branches: the record's name, or the primitive or array type.
func avroFullName(s *Schema) string {
	switch s.Type {
	case TypeStruct:
		if s.Name == "" {
			return avroNamespace + "." + avroDefaultName
		}
		return s.Name
	case TypeArray:
		return "array"
	}
	name, _ := avroType(s.Type)
	return name
}

// avroValue converts a Connect value of s into the value hamba/avro
// encodes with as, the Avro schema of s: int32 for the Avro int types, a
// map for a record, and a union's branch as a one-key map naming it (nil
// for null). The branch's name is the one hamba/avro resolves, which for
// a record with namespace "" inside another is not what Java's Avro
// makes of it; the encoding carries no names, only the branch's index.
func avroValue(as avro.Schema, s *Schema, v any) (any, error) {
	if v == nil {
		if s.Default != nil {
			// Connect's Struct.get gives a field's default for a null.
			v = s.Default
		} else if s.Optional {
			return nil, nil
		} else {
			return nil, fmt.Errorf("null for a required %s", s.Type)
		}
	}
	if u, ok := as.(*avro.UnionSchema); ok {
		for _, branch := range u.Types() {
			if branch.Type() == avro.Null {
				continue
			}
			if ref, ok := branch.(*avro.RefSchema); ok {
				branch = ref.Schema()
			}
			out, err := avroBase(branch, s, v)
			if err != nil {
				return nil, err
			}
			name := string(branch.Type())
			if n, ok := branch.(avro.NamedSchema); ok {
				name = n.FullName()
			} else if p, ok := branch.(*avro.PrimitiveSchema); ok && p.Logical() != nil {
				// hamba/avro names a logical branch type.logicalType.
				name += "." + string(p.Logical().Type())
			}
			return map[string]any{name: out}, nil
		}
	}
	return avroBase(as, s, v)
}

func avroBase(as avro.Schema, s *Schema, v any) (any, error) {
	if ref, ok := as.(*avro.RefSchema); ok {
		// A record written before, referred to by name.
		as = ref.Schema()
	}
	if d, ok := v.(javaDate); ok {
		// AvroData.fromConnectData: a logical date as its fromLogical
		// number.
		n, err := connectNumber(s.Name, d)
		if err != nil {
			return nil, err
		}
		v = n
	}
	if d, ok := v.(javaDecimal); ok {
		// TO_AVRO_LOGICAL_CONVERTERS: Decimal.fromLogical's bytes.
		v = d.bytes()
	}
	switch s.Type {
	case TypeInt8, TypeInt16, TypeInt32:
		if n, ok := v.(int64); ok {
			return int32(n), nil
		}
	case TypeInt64, TypeBoolean, TypeString, TypeFloat32, TypeFloat64, TypeBytes:
		return v, nil
	case TypeArray:
		arr, isArr := as.(*avro.ArraySchema)
		if list, ok := v.([]any); ok && isArr {
			out := make([]any, len(list))
			for i, e := range list {
				var err error
				if out[i], err = avroValue(arr.Items(), s.Items, e); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
	case TypeStruct:
		rec, isRec := as.(*avro.RecordSchema)
		if st, ok := v.(*Struct); ok && isRec {
			out := make(map[string]any, len(s.Fields))
			for i, f := range s.Fields {
				af := avroField(rec, i, f.Name)
				if af == nil {
					return nil, fmt.Errorf("the Avro schema %s has no field %q", rec.FullName(), f.Name)
				}
				fv, err := avroValue(af.Type(), f.Schema, st.Values[i])
				if err != nil {
					return nil, fmt.Errorf("field %q: %w", f.Name, err)
				}
				out[f.Name] = fv
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("a %T value for a Connect %s cannot be written with the Avro %s", v, s.Type, as.Type())
}

// avroField returns rec's field name, which is usually its i-th, the
// record having been made from the same Connect schema: looking there
// first keeps a struct of many fields from costing their square.
func avroField(rec *avro.RecordSchema, i int, name string) *avro.Field {
	fs := rec.Fields()
	if i < len(fs) && fs[i].Name() == name {
		return fs[i]
	}
	for _, f := range fs {
		if f.Name() == name {
			return f
		}
	}
	return nil
}
