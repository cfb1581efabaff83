package debezium

import "fmt"

// Bounds on a payload that routing.expand_json_payload expands. The
// expansion builds a tree of the whole document, a struct schema per
// object named after its full path (payload.a.b.c, as Debezium names
// them), and the value; unchecked, a 600 KB payload nested 100,000 levels
// deep made the relay grow past 2.6 GB, and again after every restart. So
// checkExpandLimits scans the bytes first, in memory bounded by the depth
// limit, and a payload over a bound is an error of its event (the dead
// letter topic, or a stop naming the event), never a build.
//
// What Debezium does (debezium-core, transforms/outbox): EventRouterDelegate
// reads the payload with a default Jackson ObjectMapper
// (objectMapper.readTree), then JsonSchemaData.toConnectSchema and
// toConnectData, inside catch (Exception e) { LOGGER.warn("JSON expansion
// failed", e) }. Since Jackson 2.15, StreamReadConstraints refuses a
// document nested deeper than 1000 levels (maxNestingDepth) or with a
// number longer than 1000 characters (maxNumberLength); readTree throws
// StreamConstraintsException, which that catch turns into a warning, and
// the record goes out with the payload unexpanded, as a string. With
// Jackson before 2.15 a deep document overflowed the stack instead
// (StackOverflowError is no Exception; the task dies). Debezium bounds
// nothing else: toConnectSchema builds key + "." + name for every field,
// as here, and the record's size is left to the producer's
// max.request.size.
//
// outboxrelay takes Jackson's limits as they are but refuses the event
// rather than sending a string where its topic carries structs: a
// consumer (or an Avro subject's compatibility check) that reads the
// expanded shape cannot read the string, and the payload is kept whole on
// the dead letter topic.
const (
	// ExpandMaxDepth is the deepest nesting of objects and arrays an
	// expanded payload may have: Jackson's
	// StreamReadConstraints.DEFAULT_MAX_DEPTH.
	ExpandMaxDepth = 1000
	// ExpandMaxNumberLength is the longest number literal, in characters:
	// Jackson's StreamReadConstraints.DEFAULT_MAX_NUM_LEN.
	ExpandMaxNumberLength = 1000
	// ExpandMaxNameBytes bounds the bytes of the struct schema names an
	// expansion builds, each the full path of an object (or array) from
	// the payload column down, summed over every one in the document. It
	// is what keeps a deep document within ExpandMaxDepth from costing
	// the square of its size: 1000 levels of one-letter keys name 1 MB.
	// Each name is written into the record (json+schema) or its schema
	// (avro), so a document near this bound could not fit a record of
	// the default 1 MiB limit anyway.
	ExpandMaxNameBytes = 8 << 20
	// ExpandMaxBytes is the largest payload, in bytes, that is expanded:
	// Kafka's default record limit (message.max.bytes,
	// max.request.size), past which the expanded value, no shorter than
	// the text but for spaces and dropped nulls, could not be written
	// with a JSON converter anyway. An expansion allocates up to about
	// 150 times the payload's size, some 90 times of it live at once (an
	// array of one-digit numbers, the worst case;
	// BenchmarkExpandWorstCase), so this also keeps one expansion near
	// 150 MiB.
	ExpandMaxBytes = 1 << 20
	// ExpandMaxValueBytes bounds the struct values an expansion makes,
	// each charged 16 bytes a field and its field's name (which the JSON
	// converters write once per struct). The fields of the objects of
	// one array merge into one schema, so a payload of a thousand
	// objects with a different key each makes a million fields; this
	// refuses that before the converters write a gigabyte of names.
	// A payload whose objects share their keys stays far below it.
	ExpandMaxValueBytes = 32 << 20
)

// expandLimits are the bounds checkExpandLimits applies; the zero value
// takes the Expand* constants.
type expandLimits struct {
	maxDepth, maxNumberLength, maxNameBytes, maxBytes, maxValueBytes int
}

func (l expandLimits) withDefaults() expandLimits {
	if l.maxDepth <= 0 {
		l.maxDepth = ExpandMaxDepth
	}
	if l.maxNumberLength <= 0 {
		l.maxNumberLength = ExpandMaxNumberLength
	}
	if l.maxNameBytes <= 0 {
		l.maxNameBytes = ExpandMaxNameBytes
	}
	if l.maxBytes <= 0 {
		l.maxBytes = ExpandMaxBytes
	}
	if l.maxValueBytes <= 0 {
		l.maxValueBytes = ExpandMaxValueBytes
	}
	return l
}

// ExpandLimitError says why a payload was not expanded: which bound, and
// what the payload has.
type ExpandLimitError struct {
	// What is "nesting depth", "number length", "schema name bytes",
	// "value bytes" or "payload bytes".
	What string
	// Found is the payload's value; Limit the bound it exceeds. A depth
	// is the document's deepest nesting.
	Found, Limit int
}

func (e *ExpandLimitError) Error() string {
	switch e.What {
	case "nesting depth":
		return fmt.Sprintf("the JSON payload nests %d levels deep, more than the %d that expand_json_payload (table.expand.json.payload) expands, which is Jackson's maxNestingDepth (Debezium sends such a payload unexpanded); flatten the payload or turn expansion off", e.Found, e.Limit)
	case "number length":
		return fmt.Sprintf("the JSON payload has a number of %d characters, more than the %d that expand_json_payload expands, which is Jackson's maxNumberLength (Debezium sends such a payload unexpanded); write the number as a string", e.Found, e.Limit)
	case "schema name bytes":
		return fmt.Sprintf("expanding the JSON payload would name its nested objects with %d or more bytes of schema names (each object's full path), more than the %d that expand_json_payload builds; flatten the payload or shorten its keys", e.Found, e.Limit)
	case "value bytes":
		return fmt.Sprintf("expanding the JSON payload would make struct values of %d or more bytes (objects in one array share the fields of all of them), more than the %d that expand_json_payload builds; give the objects of an array the same keys, or turn expansion off", e.Found, e.Limit)
	}
	return fmt.Sprintf("the JSON payload is %d bytes, more than the %d that expand_json_payload expands; send it unexpanded or split it", e.Found, e.Limit)
}

// checkExpandLimits scans the first JSON value of payload, as parseJSON
// reads it, and reports the first bound it exceeds. It allocates only its
// stack of open containers, at most lim.maxDepth deep, and never fails on
// JSON that is not valid: that is parseJSON's to find. column is the name
// of the top-level struct, which prefixes every other.
//
// A name is counted as expand builds it: an object's (and an array's,
// whose object elements share it) full path, its column's name or "null"
// then "." and each key on the way, keys counted as written (escapes
// included, so never less than decoded).
func checkExpandLimits(column, payload string, lim expandLimits) error {
	lim = lim.withDefaults()
	if len(payload) > lim.maxBytes {
		return &ExpandLimitError{What: "payload bytes", Found: len(payload), Limit: lim.maxBytes}
	}
	base := max(len(column), len("null"))
	// frame is an open object or array: the length of its name, and for
	// an object whether its next string is a key.
	type frame struct {
		object  bool
		wantKey bool
		name    int
	}
	var stack []frame
	nameBytes := 0
	keyLen := -1 // the key of the value to come, in the innermost object
	for i := 0; i < len(payload); i++ {
		c := payload[i]
		switch c {
		case '{', '[':
			if len(stack) == lim.maxDepth {
				return &ExpandLimitError{What: "nesting depth", Found: deepest(payload[i:], len(stack)), Limit: lim.maxDepth}
			}
			name := base
			if n := len(stack); n > 0 {
				name = stack[n-1].name
				if stack[n-1].object && keyLen >= 0 {
					name += 1 + keyLen
				}
			}
			nameBytes += name
			if nameBytes > lim.maxNameBytes {
				return &ExpandLimitError{What: "schema name bytes", Found: nameBytes, Limit: lim.maxNameBytes}
			}
			stack = append(stack, frame{object: c == '{', wantKey: c == '{', name: name})
			keyLen = -1
		case '}', ']':
			if len(stack) == 0 {
				return nil
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil // the first value ends; parseJSON reads no further
			}
			keyLen = -1
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = true
			}
			keyLen = -1
		case '"':
			end := stringEnd(payload, i)
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				stack[n-1].wantKey = false
				keyLen = end - i - 1
			}
			if end >= len(payload) {
				return nil
			}
			i = end
			if len(stack) == 0 {
				return nil
			}
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			j := i
			for j < len(payload) && isNumberByte(payload[j]) {
				j++
			}
			if j-i > lim.maxNumberLength {
				return &ExpandLimitError{What: "number length", Found: j - i, Limit: lim.maxNumberLength}
			}
			i = j - 1
			if len(stack) == 0 {
				return nil
			}
		}
	}
	return nil
}

// stringEnd returns the index of the quote that closes the string whose
// opening quote is at s[start], or len(s) when it is not closed.
func stringEnd(s string, start int) int {
	for i := start + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(s)
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// deepest returns the deepest nesting in s, which starts with an opening
// bracket inside depth others, counting brackets outside strings until
// the outermost closes; it needs no stack, so the depth an error reports
// is the document's, however deep.
func deepest(s string, depth int) int {
	top := depth
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{', '[':
			depth++
			top = max(top, depth)
		case '}', ']':
			depth--
			if depth == 0 {
				return top
			}
		case '"':
			i = stringEnd(s, i)
		}
	}
	return top
}
