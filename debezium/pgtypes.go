package debezium

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Debezium's semantic type names (io.debezium.data.*, io.debezium.time.*).
const (
	nameJSON           = "io.debezium.data.Json"
	nameUUID           = "io.debezium.data.Uuid"
	nameXML            = "io.debezium.data.Xml"
	nameDate           = "io.debezium.time.Date"
	nameTimestamp      = "io.debezium.time.Timestamp"
	nameMicroTimestamp = "io.debezium.time.MicroTimestamp"
	nameZonedTimestamp = "io.debezium.time.ZonedTimestamp"
	nameTime           = "io.debezium.time.Time"
	nameMicroTime      = "io.debezium.time.MicroTime"
	nameZonedTime      = "io.debezium.time.ZonedTime"
	nameMicroDuration  = "io.debezium.time.MicroDuration"
	nameInterval       = "io.debezium.time.Interval"
	// Kafka Connect's logical types, which time.precision.mode=connect
	// gives dates, times and timestamps.
	nameConnectDate      = "org.apache.kafka.connect.data.Date"
	nameConnectTime      = "org.apache.kafka.connect.data.Time"
	nameConnectTimestamp = "org.apache.kafka.connect.data.Timestamp"
)

// column is what the outbox table's catalog says about one column.
type column struct {
	name    string
	typName string // pg_type.typname: int4, varchar, jsonb, ...
	typMod  int32
	notNull bool
	// defaultExpr is pg_get_expr of the column default; "" for none.
	defaultExpr string
	// modes are the connector's options that type the column.
	modes valueModes
}

// errUnsupportedType says a column's type has no Debezium mapping here.
var errUnsupportedType = errors.New("type not supported")

// schema is the Connect schema Debezium's PostgreSQL connector gives the
// column with the column's modes (time.precision.mode,
// decimal.handling.mode, interval.handling.mode) and
// binary.handling.mode=bytes: optional unless NOT NULL, with the column
// default where Debezium parses one.
func (c *column) schema() (*Schema, error) {
	s := &Schema{Optional: !c.notNull}
	switch c.typName {
	case "bool":
		s.Type = TypeBoolean
	case "int2":
		s.Type = TypeInt16
	case "int4":
		s.Type = TypeInt32
	case "int8":
		s.Type = TypeInt64
	case "float4":
		s.Type = TypeFloat32
	case "float8":
		s.Type = TypeFloat64
	case "text", "varchar", "bpchar", "char", "name":
		s.Type = TypeString
	case "uuid":
		s.Type, s.Name, s.Version = TypeString, nameUUID, 1
	case "json", "jsonb":
		s.Type, s.Name, s.Version = TypeString, nameJSON, 1
	case "xml":
		s.Type, s.Name, s.Version = TypeString, nameXML, 1
	case "bytea":
		s.Type = TypeBytes
	case "date", "time", "timetz", "timestamp", "timestamptz":
		c.temporalSchema(s)
	case "numeric":
		switch c.modes.decimal {
		case DecimalDouble:
			s.Type = TypeFloat64
		case DecimalString:
			s.Type = TypeString
		default:
			c.preciseSchema(s)
		}
	case "interval":
		if c.modes.interval == IntervalString {
			s.Type, s.Name, s.Version = TypeString, nameInterval, 1
		} else {
			s.Type, s.Name, s.Version = TypeInt64, nameMicroDuration, 1
		}
	default:
		return nil, fmt.Errorf("column %q has type %s: %w (outboxrelay writes Debezium's form of bool, smallint, integer, bigint, real, double precision, text, varchar, char, uuid, json, jsonb, xml, bytea, date, time, timetz, timestamp, timestamptz, interval, and numeric)", c.name, c.typName, errUnsupportedType)
	}
	if c.defaultExpr != "" {
		if d, ok := c.parseDefault(); ok {
			s.Default = d
		}
	}
	return s, nil
}

// value converts the column's PostgreSQL text form (raw bytes for bytea)
// into the Connect value Debezium produces.
func (c *column) value(raw []byte, null bool) (any, error) {
	if null {
		return nil, nil
	}
	text := string(raw)
	switch c.typName {
	case "bool":
		switch text {
		case "t", "true":
			return true, nil
		case "f", "false":
			return false, nil
		}
		return nil, fmt.Errorf("column %q: %q is not a boolean", c.name, text)
	case "int2", "int4", "int8":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("column %q: %q is not an integer", c.name, text)
		}
		return n, nil
	case "float4":
		f, err := strconv.ParseFloat(text, 32)
		if err != nil {
			return nil, fmt.Errorf("column %q: %q is not a number", c.name, text)
		}
		return float32(f), nil
	case "float8":
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("column %q: %q is not a number", c.name, text)
		}
		return f, nil
	case "bytea":
		// A copy that stays non-nil when empty: Debezium gives a
		// zero-length bytea as ByteBuffer.wrap of an empty array
		// (JdbcValueConverters.convertBinaryToBytes, toByteBuffer), which
		// converters write as an empty value, not a null one.
		return append([]byte{}, raw...), nil
	case "uuid":
		return strings.ToLower(text), nil
	case "date", "time", "timetz", "timestamp", "timestamptz":
		v, err := c.temporalValue(text)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.name, err)
		}
		return v, nil
	case "numeric":
		v, err := c.numericValue(text)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.name, err)
		}
		return v, nil
	case "interval":
		v, err := c.intervalValue(text)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.name, err)
		}
		return v, nil
	}
	return text, nil
}

// parsePGTimestamp reads timestamp and timestamptz output in the ISO
// DateStyle: "2024-01-02 03:04:05.123456" and, with a zone, "+01",
// "+05:30" or "+05:30:15" after it. A timestamp without zone is taken as
// UTC, as Debezium does.
func parsePGTimestamp(text string, zoned bool) (time.Time, error) {
	layout := "2006-01-02 15:04:05.999999"
	if zoned {
		switch {
		case len(text) > 9 && (text[len(text)-9] == '+' || text[len(text)-9] == '-'):
			layout += "-07:00:00"
		case len(text) > 6 && (text[len(text)-6] == '+' || text[len(text)-6] == '-'):
			layout += "-07:00"
		default:
			layout += "-07"
		}
	}
	t, err := time.Parse(layout, text)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a timestamp outboxrelay can convert (set DateStyle to ISO; infinity and BC are not supported)", text)
	}
	return t.UTC(), nil
}

// timestampMillis reads the column as the record timestamp, in epoch
// milliseconds, as the router's table.field.event.timestamp does.
func (c *column) timestampMillis(raw []byte) (int64, error) {
	text := string(raw)
	switch c.typName {
	case "timestamp", "timestamptz":
		t, err := parsePGTimestamp(text, c.typName == "timestamptz")
		if err != nil {
			return 0, fmt.Errorf("column %q: %w", c.name, err)
		}
		// Java's long division truncates toward zero.
		us := t.UnixMicro()
		if c.typName == "timestamp" && c.typMod >= 0 && c.typMod <= 3 {
			return t.UnixMilli(), nil
		}
		return us / 1000, nil
	case "int8", "int4":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("column %q: %q is not an integer", c.name, text)
		}
		return n, nil
	}
	return 0, fmt.Errorf("column %q has type %s; the event timestamp must be a timestamp, timestamptz or bigint (epoch milliseconds) column", c.name, c.typName)
}

// Debezium's PostgresDefaultValueConverter reads a default expression as a
// literal ('x'::type or a bare constant); for one that calls a function
// (now(), gen_random_uuid(), nextval(...)) it puts a placeholder value in
// the schema instead.
var (
	literalDefault  = regexp.MustCompile(`'([^']*(?:''[^']*)*)'`)
	functionDefault = regexp.MustCompile(`^[(]?[A-Za-z0-9_]+\((?:.+(?:, ?.+)*)?\)`)
)

func extractDefault(expr, placeholder string) string {
	if functionDefault.MatchString(expr) {
		return placeholder
	}
	if !strings.Contains(expr, "'") {
		return expr
	}
	if m := literalDefault.FindStringSubmatch(expr); m != nil {
		return strings.ReplaceAll(m[1], "''", "'")
	}
	return expr
}

// parseDefault is the default value Debezium puts in the column's schema,
// if any: Debezium leaves it out when it cannot parse the expression.
func (c *column) parseDefault() (any, bool) {
	expr := c.defaultExpr
	// DEFAULT NULL, which PostgreSQL keeps as NULL::type: no default, for
	// every type (parseNullDefault, and extractDefault's null for text).
	if strings.HasPrefix(expr, "NULL::") {
		return nil, false
	}
	nullable := func(placeholder string) (string, bool) {
		return extractDefault(expr, placeholder), true
	}
	switch c.typName {
	case "bool":
		v, ok := nullable("false")
		return strings.EqualFold(v, "true"), ok
	case "int2", "int4", "int8":
		v, ok := nullable("0")
		if !ok {
			return nil, false
		}
		bits := map[string]int{"int2": 16, "int4": 32, "int8": 64}[c.typName]
		n, err := strconv.ParseInt(v, 10, bits)
		return n, err == nil
	case "float4":
		v, ok := nullable("0.0")
		if !ok {
			return nil, false
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 32)
		return float32(f), err == nil
	case "float8":
		v, ok := nullable("0.0")
		if !ok {
			return nil, false
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	case "text", "varchar", "bpchar":
		return extractDefault(expr, ""), true
	case "json", "jsonb":
		return extractDefault(expr, "{}"), true
	case "xml":
		return extractDefault(expr, ""), true
	case "uuid":
		v := strings.ToLower(extractDefault(expr, "00000000-0000-0000-0000-000000000000"))
		if !uuidText.MatchString(v) {
			return nil, false
		}
		return v, true
	case "date":
		v, err := c.value([]byte(extractDefault(expr, "1970-01-01")), false)
		return v, err == nil
	case "time":
		text := extractDefault(expr, "00:00")
		if len(text) == len("00:00") {
			text += ":00"
		}
		v, err := c.value([]byte(text), false)
		return v, err == nil
	case "numeric":
		if c.modes.precise() && c.variableScale() {
			// decimal.go: no Struct default.
			return nil, false
		}
		v, err := c.value([]byte(extractDefault(expr, "0.0")), false)
		return v, err == nil
	case "interval":
		// Debezium's placeholder for a function default is
		// PGInterval("epoch"), which outboxrelay does not reproduce: such
		// a column gets no default here.
		if functionDefault.MatchString(expr) {
			return nil, false
		}
		v, err := c.value([]byte(extractDefault(expr, "")), false)
		return v, err == nil
	case "timestamp", "timestamptz":
		text := extractDefault(expr, "1970-01-01 00:00:00")
		if len(text) == len("2006-01-02") {
			text += " 00:00:00"
		}
		if c.typName == "timestamptz" && !strings.ContainsAny(text[min(len(text), 19):], "+-") {
			text += "+00"
		}
		v, err := c.value([]byte(text), false)
		return v, err == nil
	}
	return nil, false
}

var uuidText = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
