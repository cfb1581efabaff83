package debezium

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The temporal columns as Debezium's PostgreSQL connector types and writes
// them, for each time.precision.mode outboxrelay accepts. The sources are
// debezium-connector-common's jdbc/TemporalPrecisionMode.java (which
// schema a precision gets in each mode), jdbc/JdbcValueConverters.java
// (convertDate, convertTime, convertTimestamp and their ...AsDate forms
// for connect), and debezium-connector-postgres's
// PostgresValueConverter.java (convertTimestampWithZone,
// convertTimeWithZone, getTimePrecision). The fixtures in
// temporal_test.go cite the lines they follow.

// precision is the column's fractional-second digits as Debezium reads
// them: PostgresValueConverter.getTimePrecision is column.scale(), which
// for time, timetz, timestamp and timestamptz is pgjdbc's
// TypeInfoCache.getScale: 6 without a type modifier, else the modifier.
func (c *column) precision() int {
	if c.typMod < 0 {
		return 6
	}
	return int(c.typMod)
}

// temporalSchema types a date, time, timetz, timestamp or timestamptz
// column. timetz and timestamptz are ZonedTime and ZonedTimestamp in every
// mode (PostgresValueConverter.schemaBuilder); the others follow
// TemporalPrecisionMode: adaptive by precision (up to 3 digits
// milliseconds, up to 6 microseconds), adaptive_time_microseconds the
// same except that a time is always MicroTime, connect Kafka Connect's
// Date, Time and Timestamp, whatever the precision.
func (c *column) temporalSchema(s *Schema) {
	s.Version = 1
	connect := c.modes.time == TimeConnect
	switch c.typName {
	case "date":
		s.Type, s.Name = TypeInt32, nameDate
		if connect {
			s.Name = nameConnectDate
		}
	case "time":
		switch {
		case connect:
			s.Type, s.Name = TypeInt32, nameConnectTime
		case c.modes.time != TimeAdaptiveMicroseconds && c.precision() <= 3:
			s.Type, s.Name = TypeInt32, nameTime
		default:
			s.Type, s.Name = TypeInt64, nameMicroTime
		}
	case "timetz":
		s.Type, s.Name = TypeString, nameZonedTime
	case "timestamp":
		switch {
		case connect:
			s.Type, s.Name = TypeInt64, nameConnectTimestamp
		case c.precision() <= 3:
			s.Type, s.Name = TypeInt64, nameTimestamp
		default:
			s.Type, s.Name = TypeInt64, nameMicroTimestamp
		}
	case "timestamptz":
		s.Type, s.Name = TypeString, nameZonedTimestamp
	}
}

// javaDate is a java.util.Date, the value Debezium gives Kafka Connect's
// logical Date, Time and Timestamp (time.precision.mode=connect):
// milliseconds since the epoch, a time as a moment of 1970-01-01.
// Converters write it by its schema's name: JsonConverter and
// AvroConverter as a number (days, milliseconds of the day, milliseconds),
// SimpleHeaderConverter and StringConverter as text.
type javaDate int64

const millisPerDay = 86_400_000

// temporalValue converts the column's text (DateStyle ISO) into the
// Connect value Debezium's converters give it.
func (c *column) temporalValue(text string) (any, error) {
	connect := c.modes.time == TimeConnect
	switch c.typName {
	case "date":
		t, err := time.Parse("2006-01-02", text)
		if err != nil {
			return nil, fmt.Errorf("%q is not a date outboxrelay can convert (infinity and BC dates are not supported)", text)
		}
		days := t.Unix() / 86400
		if connect {
			// convertDateToEpochDaysAsDate: new java.util.Date(days * MILLIS_PER_DAY).
			return javaDate(days * millisPerDay), nil
		}
		return days, nil
	case "time":
		// PostgresValueConverter.convertTime reads the text as a Duration
		// (Strings.asDuration), so 24:00:00 is a day's worth.
		us, err := parseTimeOfDay(text)
		if err != nil {
			return nil, err
		}
		switch {
		case connect:
			// Time.toMilliOfDay: Duration.toMillis, in a java.util.Date.
			return javaDate(us / 1000), nil
		case c.modes.time != TimeAdaptiveMicroseconds && c.precision() <= 3:
			return us / 1000, nil
		}
		return us, nil
	case "timetz":
		return zonedTime(text)
	case "timestamp":
		t, err := parsePGTimestamp(text, false)
		if err != nil {
			return nil, err
		}
		switch {
		case connect:
			return javaDate(t.UnixMilli()), nil
		case c.precision() <= 3:
			return t.UnixMilli(), nil
		}
		return t.UnixMicro(), nil
	case "timestamptz":
		// POSITIVE_INFINITY_TIMESTAMP_PG_STRING and its negative: the
		// text goes out as it is.
		if text == "infinity" || text == "-infinity" {
			return text, nil
		}
		t, err := parsePGTimestamp(text, true)
		if err != nil {
			return nil, err
		}
		return zonedTimestamp(t, c.precision()), nil
	}
	return nil, fmt.Errorf("type %s is not temporal", c.typName)
}

// zonedTimestamp formats t as Debezium's ZonedTimestamp from
// Debezium 2.2.0 on: PostgresValueConverter.
// convertTimestampWithZone turns the value into a ZonedDateTime at UTC and
// hands ZonedTimestamp.toIsoString the column's scale as the fraction's
// width; getDateTimeFormatter then writes exactly that many digits
// (appendFraction(NANO_OF_SECOND, w, w, true): zeros padded, more digits
// cut), and for a width of 0 falls back to ISO_OFFSET_DATE_TIME, which
// writes the fraction only as long as it needs to be. The offset is Z.
func zonedTimestamp(t time.Time, width int) string {
	t = t.UTC()
	s := t.Format("2006-01-02T15:04:05")
	return s + fraction(t.Nanosecond(), width) + "Z"
}

// fraction is Java's appendFraction(NANO_OF_SECOND, w, w, true) for a
// width from 1 to 9, and appendFraction(NANO_OF_SECOND, 0, 9, true) (the
// ISO formatters') for any other.
func fraction(ns, width int) string {
	digits := fmt.Sprintf("%09d", ns)
	if width <= 0 || width > 9 {
		digits = strings.TrimRight(digits, "0")
		if digits == "" {
			return ""
		}
		return "." + digits
	}
	return "." + digits[:width]
}

// timeOfDay matches PostgreSQL's time output: HH:MM:SS with up to six
// fraction digits; 24:00:00 is a valid time.
var timeOfDay = regexp.MustCompile(`^(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?`)

// parseTimeOfDay reads the leading HH:MM:SS[.ffffff] of text as
// microseconds since midnight; the rest is returned by the caller's
// slicing (see zonedTime).
func parseTimeOfDay(text string) (int64, error) {
	us, n, err := timePrefix(text)
	if err != nil {
		return 0, err
	}
	if n != len(text) {
		return 0, fmt.Errorf("%q is not a time outboxrelay can convert", text)
	}
	return us, nil
}

func timePrefix(text string) (us int64, n int, err error) {
	m := timeOfDay.FindStringSubmatch(text)
	if m == nil {
		return 0, 0, fmt.Errorf("%q is not a time outboxrelay can convert", text)
	}
	h, _ := strconv.ParseInt(m[1], 10, 64)
	mi, _ := strconv.ParseInt(m[2], 10, 64)
	s, _ := strconv.ParseInt(m[3], 10, 64)
	frac, _ := strconv.ParseInt((m[4] + "000000")[:6], 10, 64)
	us = ((h*60+mi)*60+s)*1_000_000 + frac
	if mi > 59 || s > 59 || us > 24*3600*1_000_000 {
		return 0, 0, fmt.Errorf("%q is not a time outboxrelay can convert", text)
	}
	return us, len(m[0]), nil
}

// timetzBoundary is PostgresTimeBoundary's 24:00:00 at UTC, which
// convertTimeWithZone passes on as "24:00:00Z".
var timetzBoundary = regexp.MustCompile(`^24:00:00(?:\.0{1,6})?(?:Z|[+-]00(?::?00)?)$`)

// zonedTime converts a timetz's text as PostgresValueConverter.
// convertTimeWithZone does: parsed with its offset, moved to UTC
// (OffsetTime.withOffsetSameInstant, which wraps around midnight), and
// written by ZonedTime.toIsoString with ISO_OFFSET_TIME: seconds always,
// the fraction as long as it needs to be, Z. A timetz(3) is not padded:
// Debezium's own AbstractRecordsProducerTest expects "11:51:30.123Z" of it.
func zonedTime(text string) (string, error) {
	if timetzBoundary.MatchString(text) {
		return "24:00:00Z", nil
	}
	us, n, err := timePrefix(text)
	if err != nil || us >= 24*3600*1_000_000 {
		return "", fmt.Errorf("%q is not a time with time zone outboxrelay can convert", text)
	}
	off, err := parseOffset(text[n:])
	if err != nil {
		return "", fmt.Errorf("%q is not a time with time zone outboxrelay can convert", text)
	}
	day := int64(24 * 3600 * 1_000_000)
	us = ((us-off*1_000_000)%day + day) % day
	t := time.UnixMicro(us).UTC()
	return t.Format("15:04:05") + fraction(t.Nanosecond(), 0) + "Z", nil
}

// parseOffset reads +HH, +HH:MM or +HH:MM:SS (or -) as seconds east of UTC.
func parseOffset(s string) (int64, error) {
	if len(s) < 3 || (s[0] != '+' && s[0] != '-') {
		return 0, fmt.Errorf("no offset in %q", s)
	}
	sign := int64(1)
	if s[0] == '-' {
		sign = -1
	}
	var secs int64
	for i, part := range strings.Split(s[1:], ":") {
		n, err := strconv.ParseInt(part, 10, 64)
		if err != nil || len(part) != 2 || i > 2 {
			return 0, fmt.Errorf("no offset in %q", s)
		}
		secs += n * []int64{3600, 60, 1}[i]
	}
	return sign * secs, nil
}

// Kafka Connect's text forms of a java.util.Date, in a worker JVM whose
// default time zone is UTC (Debezium's images run in UTC; the forms use the
// JVM's zone, so a worker in another zone writes other text).

// connectDateString is Values.dateFormatFor, which SimpleHeaderConverter
// writes (connect-api, org/apache/kafka/connect/data/Values.java): a time
// ("HH:mm:ss.SSS'Z'") for a value below one day's milliseconds, a date
// ("yyyy-MM-dd") for a whole day, else a timestamp
// ("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").
func connectDateString(d javaDate) string {
	t := time.UnixMilli(int64(d)).UTC()
	switch {
	case d < millisPerDay:
		return t.Format("15:04:05.000Z")
	case d%millisPerDay == 0:
		return t.Format("2006-01-02")
	}
	return t.Format("2006-01-02T15:04:05.000Z")
}

// javaDateString is java.util.Date.toString, which StringConverter writes:
// "EEE MMM dd HH:mm:ss zzz yyyy".
func javaDateString(d javaDate) string {
	return time.UnixMilli(int64(d)).UTC().Format("Mon Jan 02 15:04:05 UTC 2006")
}

// connectNumber is the number JsonConverter and AvroConverter write for a
// java.util.Date of schema name: Date.fromLogical (days), Time.fromLogical
// (milliseconds of the day) or Timestamp.fromLogical (milliseconds).
func connectNumber(name string, d javaDate) (int64, error) {
	switch name {
	case nameConnectDate:
		return int64(d) / millisPerDay, nil
	case nameConnectTime, nameConnectTimestamp:
		return int64(d), nil
	}
	return 0, fmt.Errorf("a java.util.Date for a schema named %q, which is none of Kafka Connect's logical dates", name)
}
