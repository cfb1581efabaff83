package debezium

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// parseConnectLiteral is Kafka Connect's Values.parseString
// (connect/api/src/main/java/org/apache/kafka/connect/data/Values.java)
// for the literals outboxrelay reproduces: the empty string, null, true
// and false, a number (INT8 to INT64 by its range when it is whole, else
// FLOAT32, or FLOAT64 where a float overflows), and text. It refuses what
// parseString would read as an array, a map, a Connect Date, Time,
// Timestamp or Decimal, and text whose first delimited part (at , : [ ] {
// } or ") starts like a number, which parseString reads as that part
// alone: say the value as text another way. A null literal has no schema.
func parseConnectLiteral(s string) (*Schema, any, error) {
	if s == "" {
		return &Schema{Type: TypeString}, "", nil
	}
	tokens := literalTokens(s)
	if len(tokens) > 1 {
		return multiTokenLiteral(s, tokens)
	}
	t := strings.TrimSpace(s)
	switch {
	case t == "null":
		return nil, nil, nil
	case t == "true", t == "false":
		return &Schema{Type: TypeBoolean}, t == "true", nil
	case t == "":
		return &Schema{Type: TypeString}, s, nil
	}
	if c := t[0]; c >= '0' && c <= '9' && (len(t) == 10 || strings.Contains(t, `\`)) {
		// parseAsTemporal tries yyyy-MM-dd on ten characters, and
		// HH:mm:ss.SSS'Z' and the timestamp on escaped colons.
		return nil, nil, fmt.Errorf("%q may be read as a Connect Date, Time or Timestamp, which outboxrelay does not write in headers", s)
	}
	if c := t[0]; (c >= '0' && c <= '9') || c == '+' || c == '-' {
		if sch, v, ok, err := literalNumber(t); ok || err != nil {
			return sch, v, err
		}
	}
	return &Schema{Type: TypeString}, s, nil
}

// multiTokenLiteral is parseString of a literal of several tokens: an
// array or map when it starts with [ or {, else the text of the whole
// literal when the first token is text.
func multiTokenLiteral(s string, tokens []string) (*Schema, any, error) {
	first := 0
	for first < len(tokens) && isJavaBlank(tokens[first]) {
		first++
	}
	if first < len(tokens) && (tokens[first] == "[" || tokens[first] == "{") {
		return nil, nil, fmt.Errorf("%q is read as a Connect array or map, which outboxrelay does not write in headers", s)
	}
	t := strings.TrimSpace(tokens[0])
	if t == "" {
		return nil, nil, fmt.Errorf("%q starts with blank text before a delimiter, which Values.parseString reads as that blank alone", s)
	}
	if c := t[0]; (c >= '0' && c <= '9') || c == '+' || c == '-' {
		return nil, nil, fmt.Errorf("%q starts with %q, which Values.parseString may read alone as a number or a time, dropping the rest", s, t)
	}
	return &Schema{Type: TypeString}, s, nil
}

// literalTokens splits s as Values.Parser does: at each unescaped
// delimiter, which is a token of its own; a backslash escapes the next
// character.
func literalTokens(s string) []string {
	var out []string
	start := 0
	escaped := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			escaped = !escaped
		case strings.IndexByte(`:,{}[]"`, c) >= 0 && !escaped:
			if start < i {
				out = append(out, s[start:i])
			}
			out = append(out, s[i:i+1])
			start = i + 1
		default:
			escaped = false
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// isJavaBlank is Utils.isBlank: empty or only characters String.trim
// removes.
func isJavaBlank(s string) bool { return strings.TrimLeft(s, javaTrimmed) == "" }

// javaTrimmed are the characters String.trim removes: those up to space.
var javaTrimmed = func() string {
	var b strings.Builder
	for c := byte(0); c <= ' '; c++ {
		b.WriteByte(c)
	}
	return b.String()
}()

// javaDecimalLiteral is new BigDecimal(String)'s syntax.
var javaDecimalLiteral = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// literalNumber is parseAsNumber: ok is false when t is not a number,
// which makes it text.
func literalNumber(t string) (*Schema, any, bool, error) {
	if !javaDecimalLiteral.MatchString(t) {
		return nil, nil, false, nil
	}
	r, ok := new(big.Rat).SetString(strings.TrimSuffix(strings.Replace(t, ".e", "e", 1), "."))
	if !ok {
		return nil, nil, false, nil
	}
	if r.IsInt() && r.Num().IsInt64() {
		n := r.Num().Int64()
		switch {
		case n >= math.MinInt8 && n <= math.MaxInt8:
			return &Schema{Type: TypeInt8}, n, true, nil
		case n >= math.MinInt16 && n <= math.MaxInt16:
			return &Schema{Type: TypeInt16}, n, true, nil
		case n >= math.MinInt32 && n <= math.MaxInt32:
			return &Schema{Type: TypeInt32}, n, true, nil
		}
		return &Schema{Type: TypeInt64}, n, true, nil
	}
	if decimalScale(t) != 0 {
		// BigDecimal.floatValue and doubleValue round to the nearest;
		// only an infinity moves on to the next type.
		if f, _ := strconv.ParseFloat(t, 32); !math.IsInf(f, 0) {
			return &Schema{Type: TypeFloat32}, float32(f), true, nil
		}
		if f, _ := strconv.ParseFloat(t, 64); !math.IsInf(f, 0) {
			return &Schema{Type: TypeFloat64}, f, true, nil
		}
	}
	return nil, nil, true, fmt.Errorf("%q is read as a Connect Decimal, which outboxrelay does not write in headers", t)
}

// decimalScale is BigDecimal's scale of t: the digits after the point
// less the exponent.
func decimalScale(t string) int {
	mant, exp, _ := strings.Cut(strings.ToLower(t), "e")
	scale := 0
	if _, frac, ok := strings.Cut(mant, "."); ok {
		scale = len(frac)
	}
	if exp != "" {
		e, _ := strconv.Atoi(exp)
		scale -= e
	}
	return scale
}
