package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// jkind is a JSON node's kind as Jackson tells numbers apart: an integer
// literal is an int when it fits 32 bits, a long when it fits 64, else a
// big integer; any literal with a fraction or exponent is a double.
type jkind uint8

const (
	jNull jkind = iota
	jString
	jBool
	jInt
	jLong
	jBig
	jDouble
	jArray
	jObject
)

// jnode is a parsed JSON value that keeps object key order.
type jnode struct {
	kind  jkind
	str   string
	b     bool
	i     int64
	f     float64
	items []*jnode
	keys  []string
	vals  []*jnode
}

// group is the node type Jackson compares when it checks that an array is
// homogeneous: all numbers are one type.
func (n *jnode) group() jkind {
	switch n.kind {
	case jInt, jLong, jBig, jDouble:
		return jDouble
	}
	return n.kind
}

// parseJSON reads the first JSON value of s, as Jackson's readTree does:
// text after it is not read; a repeated key keeps its first position and
// its last value.
func parseJSON(s string) (*jnode, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	return decodeNode(dec)
}

func decodeNode(dec *json.Decoder) (*jnode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jnode{kind: jNull}, nil
	case string:
		return &jnode{kind: jString, str: t}, nil
	case bool:
		return &jnode{kind: jBool, b: t}, nil
	case json.Number:
		return numberNode(string(t)), nil
	case json.Delim:
		switch t {
		case '[':
			n := &jnode{kind: jArray}
			for dec.More() {
				item, err := decodeNode(dec)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, item)
			}
			_, err := dec.Token()
			return n, err
		case '{':
			n := &jnode{kind: jObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key := kt.(string)
				val, err := decodeNode(dec)
				if err != nil {
					return nil, err
				}
				if i := indexOf(n.keys, key); i >= 0 {
					n.vals[i] = val
				} else {
					n.keys = append(n.keys, key)
					n.vals = append(n.vals, val)
				}
			}
			_, err := dec.Token()
			return n, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

func numberNode(text string) *jnode {
	if strings.ContainsAny(text, ".eE") {
		f, _ := strconv.ParseFloat(text, 64) // ±Inf beyond range, as Java
		return &jnode{kind: jDouble, f: f}
	}
	n, err := strconv.ParseInt(text, 10, 64)
	switch {
	case err != nil:
		return &jnode{kind: jBig, str: text}
	case n >= math.MinInt32 && n <= math.MaxInt32:
		return &jnode{kind: jInt, i: n}
	}
	return &jnode{kind: jLong, i: n}
}

func indexOf(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return -1
}

// Outcomes of expanding a payload that are not a value.
var (
	// errNotExpandable: Debezium logs "JSON expansion failed" and sends
	// the payload unchanged, as a string.
	errNotExpandable = errors.New("payload is not expandable JSON")
	// errTopLevelArray: Debezium infers an array schema it then cannot
	// fill, and its task fails on the record.
	errTopLevelArray = errors.New("the payload is a JSON array; Debezium's router expands only a JSON object (its task fails on an array)")
)

// expander turns a JSON string into a Connect struct the way Debezium's
// outbox router does with table.expand.json.payload (JsonSchemaData).
type expander struct {
	// nullsAsBytes is table.json.payload.null.behavior=optional_bytes:
	// null fields are kept as optional bytes instead of dropped.
	nullsAsBytes bool
}

// expand returns the inferred schema and value for payload, named after
// the payload column. errNotExpandable means the payload goes out as it
// is; any other error means Debezium would fail on the record.
func (x expander) expand(column, payload string) (*Schema, any, error) {
	if !strings.HasPrefix(payload, "{") && !strings.HasPrefix(payload, "[") {
		return nil, nil, errNotExpandable
	}
	node, err := parseJSON(payload)
	if err != nil {
		return nil, nil, errNotExpandable
	}
	if node.kind == jArray {
		return nil, nil, errTopLevelArray
	}
	key := column
	schema, err := x.schemaOf(&key, node)
	if err != nil {
		return nil, nil, errNotExpandable
	}
	value, err := x.data(node, schema)
	if err != nil {
		return nil, nil, fmt.Errorf("the payload cannot be expanded the way Debezium does (its task would fail on this record): %w", err)
	}
	return schema, value, nil
}

var (
	optString  = &Schema{Type: TypeString, Optional: true}
	optBoolean = &Schema{Type: TypeBoolean, Optional: true}
	optInt32   = &Schema{Type: TypeInt32, Optional: true}
	optInt64   = &Schema{Type: TypeInt64, Optional: true}
	optFloat64 = &Schema{Type: TypeFloat64, Optional: true}
	optBytes   = &Schema{Type: TypeBytes, Optional: true}
)

// childKey is Java's key + "." + name, where a null key prints "null".
func childKey(key *string, name string) string {
	if key == nil {
		return "null." + name
	}
	return *key + "." + name
}

// schemaOf is JsonSchemaData.toConnectSchema; nil means the node adds no
// field (an empty array, or a null with the default null behavior).
func (x expander) schemaOf(key *string, n *jnode) (*Schema, error) {
	switch n.kind {
	case jString:
		return optString, nil
	case jBool:
		return optBoolean, nil
	case jInt:
		return optInt32, nil
	case jLong:
		return optInt64, nil
	case jBig, jDouble:
		return optFloat64, nil
	case jArray:
		if len(n.items) == 0 {
			return nil, nil
		}
		items, err := x.arrayItems(key, n)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: TypeArray, Optional: true, Items: items}, nil
	case jObject:
		s := &Schema{Type: TypeStruct, Optional: true}
		if key != nil {
			s.Name = *key
		}
		for i, k := range n.keys {
			ck := childKey(key, k)
			fs, err := x.schemaOf(&ck, n.vals[i])
			if err != nil {
				return nil, err
			}
			if fs != nil && s.field(k) < 0 {
				s.Fields = append(s.Fields, Field{Name: k, Schema: fs})
			}
		}
		return s, nil
	case jNull:
		if x.nullsAsBytes {
			return optBytes, nil
		}
	}
	return nil, nil
}

// arrayItems is toConnectSchemaWithCycles: the element schema of a
// non-empty array. Elements must be of one JSON type (numbers of one
// Connect type); object elements' schemas are merged.
func (x expander) arrayItems(key *string, n *jnode) (*Schema, error) {
	var ref *jnode
	for _, e := range n.items {
		if e.kind == jNull {
			continue
		}
		if ref == nil {
			ref = e
		}
		if e.group() != ref.group() {
			return nil, errors.New("array is not homogenous")
		}
		if ref.group() == jDouble {
			a, _ := x.schemaOf(nil, ref)
			b, _ := x.schemaOf(nil, e)
			if a != b {
				return nil, errors.New("array mixes number types")
			}
		}
	}
	if ref != nil && ref.kind == jObject {
		// Debezium merges the distinct element schemas in the order of a
		// Java HashSet; here they merge in order of first appearance,
		// which is the same whenever the objects share their fields.
		var merged *Schema
		var seen []*Schema
		for _, e := range n.items {
			if e.kind != jObject {
				continue
			}
			s, err := x.schemaOf(key, e)
			if err != nil {
				return nil, err
			}
			dup := false
			for _, o := range seen {
				if o.equal(s) {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			seen = append(seen, s)
			merged = mergeSchemas(merged, s)
		}
		return merged, nil
	}
	if ref == nil {
		ref = &jnode{kind: jNull}
	}
	s, err := x.schemaOf(nil, ref)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("array has unrecognized member schema")
	}
	return s, nil
}

// mergeSchemas is JsonSchemaData.mergeSchema: left's fields, then right's
// new ones; a field typed bytes (from a null) takes the other's type.
func mergeSchemas(left, right *Schema) *Schema {
	if left == nil {
		return right
	}
	out := &Schema{Type: left.Type, Optional: left.Optional, Name: left.Name, Version: left.Version}
	out.Fields = append(out.Fields, left.Fields...)
	for _, f := range right.Fields {
		i := out.field(f.Name)
		switch {
		case i < 0:
			out.Fields = append(out.Fields, f)
		case !out.Fields[i].Schema.equal(f.Schema) && out.Fields[i].Schema.Type == TypeBytes && f.Schema.Type != TypeBytes:
			out.Fields[i] = f
		}
	}
	return out
}

// data is JsonSchemaData.toConnectData with Kafka Connect's checks: a
// value that does not fit its inferred schema is an error, as Struct.put
// makes it one.
func (x expander) data(n *jnode, s *Schema) (any, error) {
	if n.kind == jNull {
		return nil, nil
	}
	if s == nil {
		return nil, errors.New("no schema for a value")
	}
	mismatch := func() error {
		return fmt.Errorf("a JSON %s does not fit the inferred %s schema", kindName(n.kind), s.Type)
	}
	switch n.kind {
	case jString:
		if s.Type != TypeString {
			return nil, mismatch()
		}
		return n.str, nil
	case jBool:
		if s.Type != TypeBoolean {
			return nil, mismatch()
		}
		return n.b, nil
	case jInt:
		if s.Type != TypeInt32 {
			return nil, mismatch()
		}
		return n.i, nil
	case jLong:
		if s.Type != TypeInt64 {
			return nil, mismatch()
		}
		return n.i, nil
	case jDouble:
		if s.Type != TypeFloat64 {
			return nil, mismatch()
		}
		return n.f, nil
	case jBig:
		return nil, fmt.Errorf("integer %s does not fit in 64 bits", n.str)
	case jArray:
		if s.Type != TypeArray {
			return nil, mismatch()
		}
		list := make([]any, len(n.items))
		for i, e := range n.items {
			v, err := x.data(e, s.Items)
			if err != nil {
				return nil, err
			}
			list[i] = v
		}
		return list, nil
	case jObject:
		if s.Type != TypeStruct {
			return nil, mismatch()
		}
		st := &Struct{Schema: s, Values: make([]any, len(s.Fields))}
		for i, f := range s.Fields {
			j := indexOf(n.keys, f.Name)
			if j < 0 {
				continue
			}
			v, err := x.data(n.vals[j], f.Schema)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			st.Values[i] = v
		}
		return st, nil
	}
	return nil, mismatch()
}

func kindName(k jkind) string {
	switch k {
	case jString:
		return "string"
	case jBool:
		return "boolean"
	case jInt, jLong, jBig, jDouble:
		return "number"
	case jArray:
		return "array"
	case jObject:
		return "object"
	}
	return "null"
}

// isBlank is Java's String.trim().isEmpty(): only characters up to U+0020.
func isBlank(b []byte) bool {
	return len(bytes.TrimLeft(b, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")) == 0
}
