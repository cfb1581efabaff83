package debezium

import (
	"fmt"
	"reflect"
	"slices"
)

// Type is a Kafka Connect schema type.
type Type uint8

const (
	TypeString Type = iota + 1
	TypeBoolean
	TypeInt8
	TypeInt16
	TypeInt32
	TypeInt64
	TypeFloat32
	TypeFloat64
	TypeBytes
	TypeArray
	TypeStruct
)

// String is the name JsonConverter writes for the type.
func (t Type) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeBoolean:
		return "boolean"
	case TypeInt8:
		return "int8"
	case TypeInt16:
		return "int16"
	case TypeInt32:
		return "int32"
	case TypeInt64:
		return "int64"
	case TypeFloat32:
		return "float"
	case TypeFloat64:
		return "double"
	case TypeBytes:
		return "bytes"
	case TypeArray:
		return "array"
	case TypeStruct:
		return "struct"
	}
	return fmt.Sprintf("type(%d)", t)
}

// Schema is a Kafka Connect schema, as far as the outbox router produces
// them: no maps.
type Schema struct {
	Type     Type
	Optional bool
	Name     string
	// Version is the schema version; 0 means none.
	Version int
	// Doc is the schema's doc; "" means none.
	Doc string
	// Params are the schema's parameters, in the order SchemaBuilder's
	// LinkedHashMap keeps them (Connect's Decimal: scale, then Debezium's
	// connect.decimal.precision).
	Params []Param
	// Default is the default value (a value of this schema); nil means
	// none.
	Default any
	// Fields are a struct's fields, in order.
	Fields []Field
	// Items is an array's element schema.
	Items *Schema
}

// Param is one of a schema's parameters.
type Param struct{ Key, Value string }

// Field is a field of a struct schema.
type Field struct {
	Name   string
	Schema *Schema
}

// Struct is a value of a struct schema: one value per field, nil for
// null.
type Struct struct {
	Schema *Schema
	Values []any
}

// Values are Go values of their schema's type: string, bool, int64 for
// every integer type, float32, float64, []byte, *Struct, []any, or nil;
// javaDate for Kafka Connect's logical Date, Time and Timestamp;
// javaDecimal for its Decimal.

// param returns the value of the named parameter, "" for none.
func (s *Schema) param(key string) string {
	for _, p := range s.Params {
		if p.Key == key {
			return p.Value
		}
	}
	return ""
}

// field returns the index of the named field, or -1.
func (s *Schema) field(name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// equal reports whether two schemas are the same, as ConnectSchema.equals.
func (s *Schema) equal(o *Schema) bool {
	if s == o {
		return true
	}
	if s == nil || o == nil || s.Type != o.Type || s.Optional != o.Optional || s.Name != o.Name ||
		s.Version != o.Version || s.Doc != o.Doc || !slices.Equal(s.Params, o.Params) ||
		!reflect.DeepEqual(s.Default, o.Default) || len(s.Fields) != len(o.Fields) {
		return false
	}
	for i := range s.Fields {
		if s.Fields[i].Name != o.Fields[i].Name || !s.Fields[i].Schema.equal(o.Fields[i].Schema) {
			return false
		}
	}
	if (s.Items == nil) != (o.Items == nil) {
		return false
	}
	return s.Items == nil || s.Items.equal(o.Items)
}

// validate checks v against s the way Struct.put does (ConnectSchema.
// validateValue), so that a value Kafka Connect would refuse is refused.
func (s *Schema) validate(v any) error {
	if v == nil {
		if s.Optional {
			return nil
		}
		return fmt.Errorf("null for a required %s", s.Type)
	}
	ok := false
	switch s.Type {
	case TypeString:
		_, ok = v.(string)
	case TypeBoolean:
		_, ok = v.(bool)
	case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
		_, ok = v.(int64)
		if _, date := v.(javaDate); date {
			ok = s.Name == nameConnectDate || s.Name == nameConnectTime || s.Name == nameConnectTimestamp
		}
	case TypeFloat32:
		_, ok = v.(float32)
	case TypeFloat64:
		_, ok = v.(float64)
	case TypeBytes:
		_, ok = v.([]byte)
		if _, dec := v.(javaDecimal); dec {
			ok = s.Name == nameDecimal
		}
	case TypeArray:
		var list []any
		if list, ok = v.([]any); ok {
			for _, e := range list {
				if err := s.Items.validate(e); err != nil {
					return err
				}
			}
		}
	case TypeStruct:
		var st *Struct
		if st, ok = v.(*Struct); ok && !st.Schema.equal(s) {
			return fmt.Errorf("struct schemas do not match")
		}
	}
	if !ok {
		return fmt.Errorf("a %T value for a %s field", v, s.Type)
	}
	return nil
}
