package debezium

import "unicode/utf16"

// JsonSchemaData hands its properties and a struct's fields to everit's
// schema builders in java.util.HashMaps, whose iteration order is the
// order the schema text is written in. javaHashMap reproduces that order:
// OpenJDK's HashMap (java.util.HashMap, JDK 19 and later, which
// Debezium's and Confluent's current images run: Java 21) with string
// keys. Three maps matter, each made its own way (everit-json-schema
// 1.14.6, the version Confluent's schema-registry pins, and org.json
// 20250107, the version everit depends on):
//   - an object's properties: ObjectSchema.Builder.addPropertySchema puts
//     each field into the builder's new HashMap<>(), which the ObjectSchema
//     constructor wraps without copying ([javaPutOrder]);
//   - the unprocessed properties (connect.type, connect.version,
//     connect.parameters, connect.index): JsonSchemaData puts them into a
//     new HashMap<>(), which Schema's constructor copies with
//     new HashMap<>(map) ([javaCopyOrder]);
//   - connect.parameters' members: Collectors.toMap puts them into a new
//     HashMap<>(), and ToStringVisitor's JSONWriter writes that Map through
//     new JSONObject(map), which puts them into new HashMap<>(map.size())
//     ([javaSizedOrder]).
//
// One case it does not follow: a bucket of more than eight keys in a
// table of 64 or more, which Java turns into a red-black tree whose order
// depends on the tree; with a load factor of 0.75 that needs nine field
// names of one struct to share a bucket.

// javaStringHash is String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over
// the UTF-16 code units, in 32-bit arithmetic.
func javaStringHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			a, b := utf16.EncodeRune(r)
			h = 31*h + int32(a)
			h = 31*h + int32(b)
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}

// javaSpread is HashMap.hash: the high half folded into the low.
func javaSpread(k string) uint32 {
	h := uint32(javaStringHash(k))
	return h ^ h>>16
}

// javaHashMap is a HashMap's table of keys as far as the iteration order
// goes: buckets in index order, each in insertion order (a bucket's nodes
// are linked in that order and a resize splits them keeping it).
type javaHashMap struct {
	table     [][]string
	threshold int
	size      int
}

// newJavaHashMap is new HashMap<>(): no table yet, DEFAULT_INITIAL_CAPACITY
// 16 on the first put.
func newJavaHashMap() *javaHashMap { return &javaHashMap{} }

// copyJavaHashMap is new HashMap<>(m) of a map holding keys in that
// iteration order: putMapEntries sizes the table for them first (JDK 19
// and later: tableSizeFor(ceil(size / 0.75))), then puts them in order.
func copyJavaHashMap(keys []string) *javaHashMap {
	m := &javaHashMap{}
	if n := len(keys); n > 0 {
		t := (n*4 + 2) / 3 // ceil(n / 0.75)
		m.threshold = javaTableSizeFor(t)
	}
	for _, k := range keys {
		m.put(k)
	}
	return m
}

func javaTableSizeFor(c int) int {
	n := 1
	for n < c {
		n <<= 1
	}
	return n
}

// put is HashMap.putVal for a key not yet in the map (a key already there
// keeps its place).
func (m *javaHashMap) put(k string) {
	if m.table == nil {
		m.resize()
	}
	h := javaSpread(k)
	i := int(h & uint32(len(m.table)-1))
	for _, e := range m.table[i] {
		if e == k {
			return
		}
	}
	m.table[i] = append(m.table[i], k)
	// putVal: treeifyBin once a bucket holds TREEIFY_THRESHOLD + 1 nodes,
	// which in a table under MIN_TREEIFY_CAPACITY (64) resizes it.
	if len(m.table[i]) > 8 {
		if len(m.table) < 64 {
			m.resize()
		}
	}
	m.size++
	if m.size > m.threshold {
		m.resize()
	}
}

// resize is HashMap.resize: the first table is the threshold given, else
// 16; each later one doubles, splitting every bucket in order.
func (m *javaHashMap) resize() {
	oldCap := len(m.table)
	var newCap, newThr int
	switch {
	case oldCap > 0:
		newCap = oldCap << 1
		if oldCap >= 16 {
			newThr = m.threshold << 1
		}
	case m.threshold > 0:
		newCap = m.threshold
	default:
		newCap, newThr = 16, 12
	}
	if newThr == 0 {
		newThr = newCap * 3 / 4
	}
	table := make([][]string, newCap)
	for j, bucket := range m.table {
		for _, k := range bucket {
			if javaSpread(k)&uint32(oldCap) == 0 {
				table[j] = append(table[j], k)
			} else {
				table[j+oldCap] = append(table[j+oldCap], k)
			}
		}
	}
	m.table, m.threshold = table, newThr
}

// keys returns the keys in iteration order.
func (m *javaHashMap) keys() []string {
	out := make([]string, 0, m.size)
	for _, b := range m.table {
		out = append(out, b...)
	}
	return out
}

// newSizedJavaHashMap is new HashMap<>(n): its first table holds
// tableSizeFor(n) buckets.
func newSizedJavaHashMap(n int) *javaHashMap {
	return &javaHashMap{threshold: javaTableSizeFor(n)}
}

// javaPutOrder is the iteration order of keys put in this order into a
// new HashMap<>().
func javaPutOrder(keys []string) []string {
	m := newJavaHashMap()
	for _, k := range keys {
		m.put(k)
	}
	return m.keys()
}

// javaCopyOrder is the iteration order of keys put in this order into a
// new HashMap<>() that is then copied with new HashMap<>(it).
func javaCopyOrder(keys []string) []string {
	return copyJavaHashMap(javaPutOrder(keys)).keys()
}

// javaSizedOrder is the iteration order of keys put in this order into a
// new HashMap<>(), whose entries are then put, in its order, into a new
// HashMap<>(its size).
func javaSizedOrder(keys []string) []string {
	ordered := javaPutOrder(keys)
	m := newSizedJavaHashMap(len(ordered))
	for _, k := range ordered {
		m.put(k)
	}
	return m.keys()
}
