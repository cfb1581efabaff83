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
			var index keyIndex
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
				if i := index.find(n.keys, key); i >= 0 {
					n.vals[i] = val
				} else {
					n.keys = append(n.keys, key)
					n.vals = append(n.vals, val)
					index.add(n.keys)
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

// keyIndex finds a name among many without a scan per lookup, which made
// an object of 100,000 keys take minutes: a short list is scanned, a
// longer one gets a map. Its zero value is ready; names are only added.
type keyIndex struct{ m map[string]int }

// keyIndexFrom is the length from which a list gets a map.
const keyIndexFrom = 16

// find returns the index of k in names, or -1.
func (x *keyIndex) find(names []string, k string) int {
	if x.m == nil {
		return indexOf(names, k)
	}
	if i, ok := x.m[k]; ok {
		return i
	}
	return -1
}

// add records the last of names, just appended.
func (x *keyIndex) add(names []string) {
	switch {
	case x.m != nil:
		x.m[names[len(names)-1]] = len(names) - 1
	case len(names) >= keyIndexFrom:
		x.m = make(map[string]int, 2*len(names))
		for i, k := range names {
			x.m[k] = i
		}
	}
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
	// limits bound what is expanded; zero fields take the Expand*
	// constants.
	limits expandLimits
}

// expand returns the inferred schema and value for payload, named after
// the payload column. errNotExpandable means the payload goes out as it
// is; any other error means Debezium would fail on the record.
func (x expander) expand(column, payload string) (*Schema, any, error) {
	if !strings.HasPrefix(payload, "{") && !strings.HasPrefix(payload, "[") {
		return nil, nil, errNotExpandable
	}
	if err := checkExpandLimits(column, payload, x.limits); err != nil {
		return nil, nil, err
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
	budget := x.limits.withDefaults().maxValueBytes
	value, err := x.data(node, schema, &budget)
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
		// The keys are distinct (parseJSON keeps one of each), so no
		// field is added twice. Only an object or array uses its path,
		// as a name; building it for every scalar would cost a copy of
		// the path per field.
		for i, k := range n.keys {
			var ckp *string
			if v := n.vals[i]; v.kind == jObject || v.kind == jArray {
				ck := childKey(key, k)
				ckp = &ck
			}
			fs, err := x.schemaOf(ckp, n.vals[i])
			if err != nil {
				return nil, err
			}
			if fs != nil {
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
		// Merging a schema again changes nothing, so repeats are not
		// looked for first, which would cost the square of the items.
		var m schemaMerger
		for _, e := range n.items {
			if e.kind != jObject {
				continue
			}
			s, err := x.schemaOf(key, e)
			if err != nil {
				return nil, err
			}
			m.merge(s)
		}
		return m.out, nil
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

// schemaMerger folds schemas as JsonSchemaData.mergeSchema does, one
// after another: the first's fields, then each next one's new fields; a
// field typed bytes (from a null) takes the first other type it meets.
// It merges into one schema of its own rather than copying the fields at
// every step, which cost the square of an array's distinct fields.
type schemaMerger struct {
	out   *Schema
	names []string
	index keyIndex
}

func (m *schemaMerger) merge(s *Schema) {
	if m.out == nil {
		m.out = &Schema{Type: s.Type, Optional: s.Optional, Name: s.Name, Version: s.Version}
	}
	for _, f := range s.Fields {
		i := m.index.find(m.names, f.Name)
		switch {
		case i < 0:
			m.out.Fields = append(m.out.Fields, f)
			m.names = append(m.names, f.Name)
			m.index.add(m.names)
		case m.out.Fields[i].Schema.Type == TypeBytes && f.Schema.Type != TypeBytes:
			m.out.Fields[i] = f
		}
	}
}

// data is JsonSchemaData.toConnectData with Kafka Connect's checks: a
// value that does not fit its inferred schema is an error, as Struct.put
// makes it one.
//
// budget is what is left of limits.maxValueBytes, charged for each struct
// before it is made (see ExpandMaxValueBytes).
func (x expander) data(n *jnode, s *Schema, budget *int) (any, error) {
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
			v, err := x.data(e, s.Items, budget)
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
		if *budget -= structCost(s); *budget < 0 {
			return nil, &ExpandLimitError{What: "value bytes", Found: x.limits.withDefaults().maxValueBytes - *budget, Limit: x.limits.withDefaults().maxValueBytes}
		}
		st := &Struct{Schema: s, Values: make([]any, len(s.Fields))}
		var index keyIndex
		if len(n.keys) >= keyIndexFrom {
			index.m = make(map[string]int, len(n.keys))
			for i, k := range n.keys {
				index.m[k] = i
			}
		}
		for i, f := range s.Fields {
			j := index.find(n.keys, f.Name)
			if j < 0 {
				continue
			}
			v, err := x.data(n.vals[j], f.Schema, budget)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			st.Values[i] = v
		}
		return st, nil
	}
	return nil, mismatch()
}

// structCost is what a struct value of s is charged against
// ExpandMaxValueBytes: its slots, and its field names, which the JSON
// converters write once per struct.
func structCost(s *Schema) int {
	c := 0
	for _, f := range s.Fields {
		c += 16 + len(f.Name)
	}
	return c
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
