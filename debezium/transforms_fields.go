package debezium

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The transforms of this file work on a struct key or value as Kafka
// Connect's do (connect/transforms/src/main/java/org/apache/kafka/connect/
// transforms/{InsertField,ReplaceField,HeaderFrom,ValueToKey}.java). The
// routed record always has a schema where it has a value: Debezium's
// router gives the key its column's schema and the value the payload's,
// the envelope's or the expanded payload's, whatever the converter writes
// of it. So their schemaless branches (a Map) meet only a null, and a
// value that is not a struct fails as Requirements.requireStruct fails.
// The struct schema they build is SchemaUtil.copySchemaBasics of the old
// one: its name, doc and parameters, but neither its version nor its
// optionality, which the converters then write as Kafka Connect's do.

var (
	headerFromOptions   = []string{"fields", "headers", "operation", "replace.null.with.default"}
	insertFieldOptions  = []string{"topic.field", "partition.field", "offset.field", "timestamp.field", "static.field", "static.value", "replace.null.with.default"}
	replaceFieldOptions = []string{"exclude", "include", "renames", "replace.null.with.default"}
)

// The replace.null.with.default option of these transforms chooses
// Struct.get (a null field's default) or getWithoutDefault. It changes
// nothing here: the router puts a column's default in place of its NULL,
// as Debezium's does, so no struct it makes holds a null where its field
// has a default.
func checkReplaceNull(o transformOptions) error {
	_, err := o.boolean("replace.null.with.default", true)
	return err
}

// requireStruct is Requirements.requireStruct.
func requireStruct(p *recordPart, purpose string) (*Struct, error) {
	if st, ok := p.value.(*Struct); ok {
		return st, nil
	}
	return nil, fmt.Errorf("only Struct objects supported for [%s], found: %s", purpose, javaClassName(p.schema, p.value))
}

// requireMapOf is Requirements.requireMap, which the routed record meets
// only with a null value.
func requireMapOf(p *recordPart, purpose string) error {
	return fmt.Errorf("only Map objects supported in absence of schema for [%s], found: %s", purpose, javaClassName(p.schema, p.value))
}

// javaClassName is the class Kafka Connect holds v in, for errors.
func javaClassName(s *Schema, v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "java.lang.String"
	case bool:
		return "java.lang.Boolean"
	case float32:
		return "java.lang.Float"
	case float64:
		return "java.lang.Double"
	case []byte:
		return "[B"
	case []any:
		return "java.util.ArrayList"
	case javaDate:
		return "java.util.Date"
	case javaDecimal:
		return "java.math.BigDecimal"
	case int64:
		switch s.Type {
		case TypeInt8:
			return "java.lang.Byte"
		case TypeInt16:
			return "java.lang.Short"
		case TypeInt32:
			return "java.lang.Integer"
		}
		return "java.lang.Long"
	}
	return fmt.Sprintf("%T", v)
}

// structBasics is SchemaUtil.copySchemaBasics(s, SchemaBuilder.struct()).
func structBasics(s *Schema) *Schema {
	return &Schema{Type: TypeStruct, Name: s.Name, Doc: s.Doc, Params: slices.Clone(s.Params)}
}

// addField is SchemaBuilder.field, which refuses a name twice.
func addField(s *Schema, name string, fs *Schema) error {
	if s.field(name) >= 0 {
		return fmt.Errorf("cannot create field because of field name duplication %s", name)
	}
	s.Fields = append(s.Fields, Field{Name: name, Schema: fs})
	return nil
}

// insertionSpec is InsertField's InsertionSpec: a field name, required
// with a ! suffix, optional with ? or none.
type insertionSpec struct {
	name     string
	optional bool
}

func parseInsertionSpec(o transformOptions, key string) *insertionSpec {
	v, ok := o.get(key)
	if !ok {
		return nil
	}
	if n, ok := strings.CutSuffix(v, "?"); ok {
		return &insertionSpec{n, true}
	}
	if n, ok := strings.CutSuffix(v, "!"); ok {
		return &insertionSpec{n, false}
	}
	return &insertionSpec{v, true}
}

func (sp *insertionSpec) schema(s Schema) *Schema {
	s.Optional = sp.optional
	return &s
}

// compileInsertField is InsertField$Key or $Value.
func compileInsertField(p part) func(o transformOptions) (transformFunc, error) {
	return func(o transformOptions) (transformFunc, error) {
		topic, partition := parseInsertionSpec(o, "topic.field"), parseInsertionSpec(o, "partition.field")
		ts, static := parseInsertionSpec(o, "timestamp.field"), parseInsertionSpec(o, "static.field")
		staticValue, hasStatic := o.get("static.value")
		var errs []error
		if parseInsertionSpec(o, "offset.field") != nil {
			errs = append(errs, errors.New("option offset.field: InsertField takes the offset from a sink record only (requireSinkRecord), and fails on every record of a source connector"))
		}
		if topic == nil && partition == nil && ts == nil && static == nil {
			errs = append(errs, errors.New("no field insertion configured"))
		}
		if static != nil && !hasStatic {
			errs = append(errs, fmt.Errorf("option static.value: no value specified for static field %s", static.name))
		}
		errs = append(errs, checkReplaceNull(o))
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return func(rec *connectRecord) (*connectRecord, error) {
			op := p.of(rec)
			if op.value == nil {
				return rec, nil
			}
			if op.schema == nil {
				return nil, requireMapOf(op, "field insertion")
			}
			st, err := requireStruct(op, "field insertion")
			if err != nil {
				return nil, err
			}
			s := structBasics(st.Schema)
			values := slices.Clone(st.Values)
			s.Fields = slices.Clone(st.Schema.Fields)
			insert := func(sp *insertionSpec, base Schema, v any) error {
				if sp == nil {
					return nil
				}
				fs := sp.schema(base)
				if err := addField(s, sp.name, fs); err != nil {
					return err
				}
				if v == nil && !fs.Optional {
					return fmt.Errorf("field %s is required, and the record has no value for it", sp.name)
				}
				values = append(values, v)
				return nil
			}
			var pv any
			if rec.partition != nil {
				pv = int64(*rec.partition)
			}
			tsSchema := Schema{Type: TypeInt64, Name: nameConnectTimestamp, Version: 1}
			if err := errors.Join(insert(topic, Schema{Type: TypeString}, rec.topic), insert(partition, Schema{Type: TypeInt32}, pv),
				insert(ts, tsSchema, javaDate(rec.millis())), insert(static, Schema{Type: TypeString}, staticOrNil(static, staticValue))); err != nil {
				return nil, err
			}
			out := *rec
			*p.of(&out) = recordPart{schema: s, value: &Struct{Schema: s, Values: values}, label: p.String()}
			return &out, nil
		}, nil
	}
}

func staticOrNil(sp *insertionSpec, v string) any {
	if sp == nil {
		return nil
	}
	return v
}

// compileReplaceField is ReplaceField$Key or $Value: the fields exclude
// does not name and include (when set) does, renamed by renames.
func compileReplaceField(p part) func(o transformOptions) (transformFunc, error) {
	return func(o transformOptions) (transformFunc, error) {
		exclude, include := o.list("exclude"), o.list("include")
		renames := map[string]string{}
		for _, m := range o.list("renames") {
			// parseRenameMappings: String.split(":") drops trailing empty
			// parts, and anything but two parts is invalid.
			parts := strings.Split(m, ":")
			for len(parts) > 0 && parts[len(parts)-1] == "" {
				parts = parts[:len(parts)-1]
			}
			if len(parts) != 2 {
				return nil, fmt.Errorf("option renames: invalid rename mapping: %s", m)
			}
			renames[parts[0]] = parts[1]
		}
		if err := checkReplaceNull(o); err != nil {
			return nil, err
		}
		keep := func(name string) bool {
			return !slices.Contains(exclude, name) && (len(include) == 0 || slices.Contains(include, name))
		}
		return func(rec *connectRecord) (*connectRecord, error) {
			op := p.of(rec)
			if op.value == nil {
				return rec, nil
			}
			if op.schema == nil {
				return nil, requireMapOf(op, "field replacement")
			}
			st, err := requireStruct(op, "field replacement")
			if err != nil {
				return nil, err
			}
			s := structBasics(st.Schema)
			var values []any
			for i, f := range st.Schema.Fields {
				if !keep(f.Name) {
					continue
				}
				name := f.Name
				if to, ok := renames[name]; ok {
					name = to
				}
				if err := addField(s, name, f.Schema); err != nil {
					return nil, err
				}
				values = append(values, st.Values[i])
			}
			out := *rec
			*p.of(&out) = recordPart{schema: s, value: &Struct{Schema: s, Values: values}, label: p.String()}
			return &out, nil
		}, nil
	}
}

// compileHeaderFrom is HeaderFrom$Key or $Value: each field's value as a
// header of the name at the same place in headers, the field removed
// from the struct with operation move.
func compileHeaderFrom(p part) func(o transformOptions) (transformFunc, error) {
	return func(o transformOptions) (transformFunc, error) {
		fields, headers := o.list("fields"), o.list("headers")
		op, _ := o.get("operation")
		var errs []error
		if len(fields) == 0 || len(headers) == 0 {
			errs = append(errs, errors.New("options fields and headers must each name at least one"))
		} else if len(fields) != len(headers) {
			errs = append(errs, errors.New("'fields' config must have the same number of elements as 'headers' config"))
		}
		if op != "move" && op != "copy" {
			errs = append(errs, fmt.Errorf("option operation: %q is not move or copy", op))
		}
		errs = append(errs, checkReplaceNull(o))
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		purpose := "header " + op
		return func(rec *connectRecord) (*connectRecord, error) {
			part := p.of(rec)
			if part.schema == nil {
				return nil, requireMapOf(part, purpose)
			}
			st, err := requireStruct(part, purpose)
			if err != nil {
				return nil, err
			}
			out := *rec
			out.headers = slices.Clip(rec.headers)
			for i, f := range fields {
				fi := part.schema.field(f)
				if fi < 0 {
					return nil, fmt.Errorf("the %s has no field %s", p, f)
				}
				out.headers = append(out.headers, connectHeader{key: headers[i], schema: part.schema.Fields[fi].Schema, value: st.Values[fi], label: "header " + headers[i]})
			}
			if op == "move" {
				s := structBasics(part.schema)
				var values []any
				for i, f := range part.schema.Fields {
					if !slices.Contains(fields, f.Name) {
						s.Fields = append(s.Fields, f)
						values = append(values, st.Values[i])
					}
				}
				*p.of(&out) = recordPart{schema: s, value: &Struct{Schema: s, Values: values}, label: p.String()}
			}
			return &out, nil
		}, nil
	}
}

// compileValueToKey is ValueToKey: the key becomes an unnamed struct of
// the value's fields listed.
func compileValueToKey(o transformOptions) (transformFunc, error) {
	fields := o.list("fields")
	if len(fields) == 0 {
		return nil, errors.New("option fields must name at least one field")
	}
	if err := checkReplaceNull(o); err != nil {
		return nil, err
	}
	const purpose = "copying fields from value to key"
	return func(rec *connectRecord) (*connectRecord, error) {
		if rec.value.schema == nil {
			return nil, requireMapOf(&rec.value, purpose)
		}
		st, err := requireStruct(&rec.value, purpose)
		if err != nil {
			return nil, err
		}
		ks := &Schema{Type: TypeStruct}
		var values []any
		for _, f := range fields {
			fi := st.Schema.field(f)
			if fi < 0 {
				return nil, fmt.Errorf("field does not exist: %s", f)
			}
			if err := addField(ks, f, st.Schema.Fields[fi].Schema); err != nil {
				return nil, err
			}
			values = append(values, st.Values[fi])
		}
		out := *rec
		out.key = recordPart{schema: ks, value: &Struct{Schema: ks, Values: values}, label: "key"}
		out.value = recordPart{schema: st.Schema, value: st, label: rec.value.label}
		return &out, nil
	}, nil
}
