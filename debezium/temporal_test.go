package debezium

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// Temporal, numeric and interval columns as Debezium's PostgreSQL
// connector types and writes them in each mode outboxrelay accepts. Each
// expected value is written from Debezium's source (debezium/debezium at
// aad5519902), cited beside it:
//   - PVC is debezium-connector-postgres/.../PostgresValueConverter.java,
//   - JVC is debezium-connector-common/.../jdbc/JdbcValueConverters.java,
//   - TPM is debezium-connector-common/.../jdbc/TemporalPrecisionMode.java,
//   - ARPT is debezium-connector-postgres/src/test/.../AbstractRecordsProducerTest.java
//     (schemaAndValuesForDateTimeTypes), whose table is
//     postgres_create_tables.ddl's time_table.
func TestModeColumns(t *testing.T) {
	adaptive := valueModes{}
	atm := valueModes{time: TimeAdaptiveMicroseconds}
	connect := valueModes{time: TimeConnect}
	for _, tc := range []struct {
		name   string
		c      column
		text   string
		schema string
		value  any
	}{
		// ZonedTimestamp.getDateTimeFormatter pads to the column's scale
		// (PVC convertTimestampWithZone: column.scale(), pgjdbc's
		// TypeInfoCache.getScale: 6 without a modifier); ARPT expects
		// "+21016-11-04T06:51:30.000000Z" of tz_zero and RecordsStreamProducerIT
		// "2020-04-01T04:01:02.000000Z". Every mode: PVC.schemaBuilder
		// types TIMESTAMPTZ as ZonedTimestamp unless structured.
		{"timestamptz padded to 6", column{typName: "timestamptz", typMod: -1}, "2016-11-04 13:51:30.5+02",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`, "2016-11-04T11:51:30.500000Z"},
		{"timestamptz whole second", column{typName: "timestamptz", typMod: -1, modes: connect}, "2020-04-01 04:01:02+00",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`, "2020-04-01T04:01:02.000000Z"},
		// timestamptz(3): scale 3, three digits.
		{"timestamptz(3)", column{typName: "timestamptz", typMod: 3}, "2016-11-04 13:51:30.12+00",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`, "2016-11-04T13:51:30.120Z"},
		// timestamptz(0): width 0 falls back to ISO_OFFSET_DATE_TIME.
		{"timestamptz(0)", column{typName: "timestamptz", typMod: 0}, "2016-11-04 13:51:30+00",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`, "2016-11-04T13:51:30Z"},
		// PVC POSITIVE_INFINITY_TIMESTAMP_PG_STRING; ARPT tz_pinf.
		{"timestamptz infinity", column{typName: "timestamptz", typMod: -1}, "infinity",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`, "infinity"},
		// ZonedTime: ISO_OFFSET_TIME, never padded; ARPT ttz "11:51:30.123789Z",
		// tptz (time(3) with time zone) "11:51:30.123Z".
		{"timetz", column{typName: "timetz", typMod: -1}, "13:51:30.123789+02",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTime","version":1}`, "11:51:30.123789Z"},
		{"timetz(3)", column{typName: "timetz", typMod: 3, modes: connect}, "13:51:30.123+02",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTime","version":1}`, "11:51:30.123Z"},
		{"timetz wraps at midnight", column{typName: "timetz", typMod: -1}, "01:00:00+05:30",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTime","version":1}`, "19:30:00Z"},
		// PostgresTimeBoundary.TIME_WITH_TIMEZONE_BOUNDARY_AT_UTC.
		{"timetz 24:00", column{typName: "timetz", typMod: -1}, "24:00:00+00",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTime","version":1}`, "24:00:00Z"},
		// TPM ADAPTIVE: time up to 3 digits Time (int32 ms), up to 6
		// MicroTime; ARPT ti "13:51:30" as MicroTime, tip (time(3)) as Time.
		{"time adaptive", column{typName: "time", typMod: -1}, "13:51:30",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1}`, int64(49890000000)},
		{"time(3) adaptive", column{typName: "time", typMod: 3}, "13:51:30.123",
			`{"type":"int32","optional":true,"name":"io.debezium.time.Time","version":1}`, int64(49890123)},
		// ARPT ttf: 24:00:00 is a day of microseconds.
		{"time 24:00", column{typName: "time", typMod: -1}, "24:00:00",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1}`, int64(86400000000)},
		// TPM ADAPTIVE_TIME_MICROSECONDS: a time is always MicroTime.
		{"time(3) adaptive_time_microseconds", column{typName: "time", typMod: 3, modes: atm}, "13:51:30.123",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1}`, int64(49890123000)},
		// TPM CONNECT: Kafka Connect's Time, a java.util.Date
		// (JVC convertTimeToMillisPastMidnightAsDate).
		{"time connect", column{typName: "time", typMod: -1, modes: connect}, "13:51:30.123456",
			`{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1}`, javaDate(49890123)},
		// TPM: timestamp by precision in both adaptive modes.
		{"timestamp adaptive_time_microseconds", column{typName: "timestamp", typMod: -1, modes: atm}, "2016-11-04 13:51:30.123456",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1}`, int64(1478267490123456)},
		{"timestamp(3) adaptive_time_microseconds", column{typName: "timestamp", typMod: 3, modes: atm}, "2016-11-04 13:51:30.123",
			`{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1}`, int64(1478267490123)},
		// JVC convertTimestampToEpochMillisAsDate.
		{"timestamp connect", column{typName: "timestamp", typMod: -1, modes: connect}, "2016-11-04 13:51:30.123456",
			`{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1}`, javaDate(1478267490123)},
		// JVC convertDateToEpochDays / ...AsDate.
		{"date adaptive_time_microseconds", column{typName: "date", modes: atm}, "2016-11-04",
			`{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1}`, int64(17109)},
		{"date connect", column{typName: "date", modes: connect}, "2016-11-04",
			`{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1}`, javaDate(17109 * millisPerDay)},
		{"date adaptive", column{typName: "date", modes: adaptive, defaultExpr: "'2016-11-04'::date"}, "2016-11-05",
			`{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"default":17109}`, int64(17110)},
		// SpecialValueDecimal.builder: double is FLOAT64, string STRING;
		// fromLogical: doubleValue, toPlainString.
		{"numeric double", column{typName: "numeric", typMod: 10<<16 | 2 + 4, modes: valueModes{decimal: DecimalDouble}}, "12.50",
			`{"type":"double","optional":true}`, 12.5},
		{"numeric string", column{typName: "numeric", typMod: 10<<16 | 2 + 4, modes: valueModes{decimal: DecimalString}, defaultExpr: "5"}, "12.50",
			`{"type":"string","optional":true,"default":"5.00"}`, "12.50"},
		{"numeric unconstrained string", column{typName: "numeric", typMod: -1, modes: valueModes{decimal: DecimalString}}, "1.500",
			`{"type":"string","optional":true}`, "1.500"},
		// SpecialValueDecimal: NaN as the enum's name, or Double.NaN.
		{"numeric NaN string", column{typName: "numeric", typMod: -1, modes: valueModes{decimal: DecimalString}}, "NaN",
			`{"type":"string","optional":true}`, "NAN"},
		// MicroDuration.durationMicros(1, 2, 3, 4, 5, 6.78, DAYS_PER_MONTH_AVG);
		// ARPT it, for '1 year 2 months 3 days 4 hours 5 minutes 6.78 seconds'.
		{"interval numeric", column{typName: "interval", typMod: -1}, "1 year 2 mons 3 days 04:05:06.78",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroDuration","version":1}`, int64(37091106780000)},
		// Interval.toIsoString; ARPT schemaAndValuesForIntervalAsString
		// expects "P1Y2M3DT4H5M6.78S" of the same value.
		{"interval string", column{typName: "interval", typMod: -1, modes: valueModes{interval: IntervalString}}, "1 year 2 mons 3 days 04:05:06.78",
			`{"type":"string","optional":true,"name":"io.debezium.time.Interval","version":1}`, "P1Y2M3DT4H5M6.78S"},
		{"interval string negative", column{typName: "interval", typMod: -1, modes: valueModes{interval: IntervalString}}, "-1 days +02:03:00",
			`{"type":"string","optional":true,"name":"io.debezium.time.Interval","version":1}`, "P0Y0M-1DT2H3M0S"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.name = "c"
			s, err := tc.c.schema()
			if err != nil {
				t.Fatal(err)
			}
			if got := string(appendSchemaJSON(nil, s, "")); got != tc.schema {
				t.Errorf("schema\n got %s\nwant %s", got, tc.schema)
			}
			v, err := tc.c.value([]byte(tc.text), false)
			if err != nil || !equalValue(v, tc.value) {
				t.Errorf("value of %q: %#v (%v), want %#v", tc.text, v, err, tc.value)
			}
			if err := s.validate(v); err != nil {
				t.Errorf("the value does not fit its schema: %v", err)
			}
		})
	}
	// Debezium's default, precise: decimal_test.go.
	v, err := (&column{name: "n", typName: "numeric", typMod: -1, modes: valueModes{decimal: DecimalDouble}}).value([]byte("NaN"), false)
	if f, ok := v.(float64); err != nil || !ok || !math.IsNaN(f) {
		t.Errorf("numeric NaN double: %v (%v), want NaN", v, err)
	}
}

// Kafka Connect's logical dates (time.precision.mode=connect) as each
// converter writes them: JsonConverter's LOGICAL_CONVERTERS as the
// fromLogical number; SimpleHeaderConverter through Values.dateFormatFor
// (time below a day's milliseconds, date on a whole day, else timestamp,
// in a UTC JVM); StringConverter as java.util.Date.toString.
func TestConnectDates(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		schema               *Schema
		v                    javaDate
		json, header, string string
	}{
		{"date", &Schema{Type: TypeInt32, Name: nameConnectDate, Version: 1}, javaDate(17109 * millisPerDay), "17109", "2016-11-04", "Fri Nov 04 00:00:00 UTC 2016"},
		{"time", &Schema{Type: TypeInt32, Name: nameConnectTime, Version: 1}, javaDate(49890123), "49890123", "13:51:30.123Z", "Thu Jan 01 13:51:30 UTC 1970"},
		{"timestamp", &Schema{Type: TypeInt64, Name: nameConnectTimestamp, Version: 1}, javaDate(1478267490123), "1478267490123", "2016-11-04T13:51:30.123Z", "Fri Nov 04 13:51:30 UTC 2016"},
		{"timestamp at midnight", &Schema{Type: TypeInt64, Name: nameConnectTimestamp, Version: 1}, javaDate(17109 * millisPerDay), "1478217600000", "2016-11-04", "Fri Nov 04 00:00:00 UTC 2016"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := convert(FormatJSON, tc.schema, tc.v); err != nil || string(b) != tc.json {
				t.Errorf("json %s (%v), want %s", b, err, tc.json)
			}
			if b, err := convertHeader(FormatSimple, tc.schema, tc.v); err != nil || string(b) != tc.header {
				t.Errorf("header %s (%v), want %s", b, err, tc.header)
			}
			if b, err := convert(FormatString, tc.schema, tc.v); err != nil || string(b) != tc.string {
				t.Errorf("string %s (%v), want %s", b, err, tc.string)
			}
		})
	}
}

// The envelope of a connect-mode date, time and timestamp, and of the
// ZonedTimestamp, in Avro: AvroData.fromConnectSchema gives Connect's
// logical types their Avro logicalType (date, time-millis,
// timestamp-millis) after the connect.* properties, and fromConnectData
// writes the fromLogical numbers; Debezium's own time types stay named
// primitives.
func TestAvroModeColumns(t *testing.T) {
	cols := []*column{
		{name: "d", typName: "date", typMod: -1, modes: valueModes{time: TimeConnect}},
		{name: "ti", typName: "time", typMod: -1, modes: valueModes{time: TimeConnect}},
		{name: "ts", typName: "timestamp", typMod: -1, modes: valueModes{time: TimeConnect}},
		{name: "tz", typName: "timestamptz", typMod: 3, modes: valueModes{time: TimeConnect}},
	}
	texts := []string{"2016-11-04", "13:51:30.123456", "2016-11-04 13:51:30.123456", "2016-11-04 13:51:30.5+00"}
	s, st := recordOf(t, "dbserver1.public.outbox.order.Value", cols, texts)
	text, err := avroSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"record","name":"Value","namespace":"dbserver1.public.outbox.order","fields":[` +
		`{"name":"d","type":["null",{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Date","logicalType":"date"}],"default":null},` +
		`{"name":"ti","type":["null",{"type":"int","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Time","logicalType":"time-millis"}],"default":null},` +
		`{"name":"ts","type":["null",{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp","logicalType":"timestamp-millis"}],"default":null},` +
		`{"name":"tz","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null}],` +
		`"connect.name":"dbserver1.public.outbox.order.Value"}`
	if text != want {
		t.Errorf("schema\n got %s\nwant %s", text, want)
	}
	b := avroBytes(t, text, s, st)
	// Each field: the union's branch 1 (zigzag 02), then the value.
	zig := func(n int64) []byte { return binary.AppendVarint(nil, n) }
	var wantB []byte
	for _, n := range []int64{17109, 49890123, 1478267490123} {
		wantB = append(append(wantB, 2), zig(n)...)
	}
	wantB = append(append(append(wantB, 2), zig(int64(len("2016-11-04T13:51:30.500Z")))...), "2016-11-04T13:51:30.500Z"...)
	if !bytes.Equal(b, wantB) {
		t.Errorf("encoded % x\nwant % x", b, wantB)
	}
}
