package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The example's outbox table with a nullable tenant column, the record key
// of the connectors below.
var tenantDDL = strings.Replace(outboxEventDDL, "payload       jsonb", "payload       jsonb,\n\ttenant        varchar(64)", 1)

// TestDebeziumNullKey runs connectors whose table.field.event.key is a
// nullable column, for each key converter, and inserts a row with a
// tenant, one with a NULL tenant, and one with a tenant again. Debezium
// sends the NULL row as a record with a null key: EventRouterDelegate.
// defineRecordKey is eventStruct.get(fieldEventKey), null for a NULL
// without a column default, and the key schema the column's optional
// string (defineRecordKeySchema). Each converter then writes what its
// fromConnectData makes of (optional string, null):
//   - StringConverter: null (serializer.serialize(topic, null));
//   - JsonConverter, schemas.enable=false: the JSON text null
//     (convertToJsonWithoutEnvelope gives a NullNode, which the
//     JsonSerializer writes; only a null schema with a null value is a null
//     record key);
//   - JsonConverter, schemas.enable=true: the envelope with payload null;
//   - BinaryDataConverter delegating to StringConverter: the schema is
//     not BYTES, so the delegate's null;
//   - Confluent's AvroConverter: null, registering nothing
//     (AbstractKafkaAvroSerializer.serializeImpl returns null for a null
//     object before it looks at the registry).
//
// Every event arrives, the valid ones around the NULL one too; a null key
// is partitioned by the producer's sticky partitioner (no aggregate
// order); the keyed ones keep theirs.
func TestDebeziumNullKey(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		avro        bool
		// keyed is the key of tenant t1, null the NULL tenant's key; nil
		// for a null record key.
		keyed, null []byte
	}{
		{name: "StringConverter", extra: `, "key.converter": "org.apache.kafka.connect.storage.StringConverter"`,
			keyed: []byte("t1"), null: nil},
		{name: "JsonConverter", extra: `, "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false"`,
			keyed: []byte(`"t1"`), null: []byte("null")},
		{name: "JsonConverter with schemas", extra: ``,
			keyed: []byte(`{"schema":{"type":"string","optional":true},"payload":"t1"}`),
			null:  []byte(`{"schema":{"type":"string","optional":true},"payload":null}`)},
		{name: "BinaryDataConverter", extra: `, "key.converter": "io.debezium.converters.BinaryDataConverter",
			"key.converter.delegate.converter.type": "org.apache.kafka.connect.storage.StringConverter"`,
			keyed: []byte("t1"), null: nil},
		{name: "AvroConverter", avro: true, null: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			pgURL, pool, slot := debeziumDatabase(ctx, t, tenantDDL)
			ids := make([]string, 3)
			for i, tenant := range []any{"t1", nil, "t1"} {
				ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1)
				if _, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, 'Order', 'agg', 'OrderCreated', '2019-05-03 13:31:34.484', $2, $3)`,
					ids[i], fmt.Sprintf(`{"seq": %d}`, i+1), tenant); err != nil {
					t.Fatal(err)
				}
			}
			_, brokers := testenv.Kafka(t)
			extra := tc.extra
			var reg *testenv.Registry
			if tc.avro {
				reg = testenv.StartRegistry(t, "", "")
				extra = `, "key.converter": "io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url": "` + reg.URL + `"`
			}
			extra = `, "transforms.outbox.table.field.event.key": "tenant"` + extra
			p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, extra), "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
			recs := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 3)
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d:\n%s", code, p.out.String())
			}
			byID := map[string]*kgo.Record{}
			for _, r := range recs {
				byID[header(r, "id")] = r
			}
			for i, id := range ids {
				r := byID[id]
				if r == nil {
					t.Fatalf("no record for event %s; got %d records", id, len(recs))
				}
				switch {
				case i == 1 && (r.Key == nil) != (tc.null == nil), i == 1 && string(r.Key) != string(tc.null):
					t.Errorf("NULL tenant: key %q (null %t), want %q (null %t)", r.Key, r.Key == nil, tc.null, tc.null == nil)
				case i != 1 && tc.avro:
					if got, ok := avroText(t, reg, r.Key); !ok || got != "t1" {
						t.Errorf("tenant t1: Avro key %q (%t), want t1", got, ok)
					}
				case i != 1 && string(r.Key) != string(tc.keyed):
					t.Errorf("tenant t1: key %q, want %q", r.Key, tc.keyed)
				}
				// A key, JsonConverter's null too, is hashed as the Java
				// producer hashes it; a null key has no such partition.
				if r.Key != nil {
					if p := javaPartition(r.Key, partitions); r.Partition != p {
						t.Errorf("event %d: partition %d, the Java producer's is %d", i+1, r.Partition, p)
					}
				}
			}
			if a, b := byID[ids[0]], byID[ids[2]]; a.Partition != b.Partition || a.Offset > b.Offset {
				t.Errorf("tenant t1's events at %d/%d and %d/%d, want one partition in commit order", a.Partition, a.Offset, b.Partition, b.Offset)
			}
			if tc.avro {
				if got := reg.Subjects()["Order.events-key"]; len(got) != 1 {
					t.Errorf("key subject holds %d schemas, want the one of tenant t1 alone; the null key registers nothing", len(got))
				}
			}
		})
	}
}

// TestDebeziumKeyByID takes the key from the event id column
// (table.field.event.key=id), which Debezium reads apart from the id
// header: the uuid column's schema (io.debezium.data.Uuid, required) with
// JsonConverter's envelope.
func TestDebeziumKeyByID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	id := insertOutboxEvent(ctx, t, pool, 7)
	_, brokers := testenv.Kafka(t)
	p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, `, "transforms.outbox.table.field.event.key": "id"`),
		"OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	r := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 1)[0]
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d:\n%s", code, p.out.String())
	}
	want := `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"` + id + `"}`
	if string(r.Key) != want || header(r, "id") != id {
		t.Errorf("key %s, id header %s; want key %s and id %s", r.Key, header(r, "id"), want, id)
	}
}

// The example's outbox table with a column of each type the router
// places in headers and envelopes that Debezium's modes change.
var valuesDDL = strings.Replace(outboxEventDDL, "payload       jsonb", `payload       jsonb,
	tz timestamptz, tz3 timestamptz(3), ttz timetz, ti time, ti3 time(3), ts timestamp, d date,
	amount numeric(10,2), dur interval`, 1)

const valuesRow = `INSERT INTO inventory.outboxevent VALUES ('00000000-0000-4000-8000-000000000001', 'Order', '1', 'OrderCreated',
	'2019-05-03 13:31:34.484', '{"seq": 1}', '2024-03-04 05:06:07.5+00', '2024-03-04 05:06:07.5+00', '13:51:30.123789+02',
	'13:51:30.123456', '13:51:30.123', '2016-11-04 13:51:30.123456', '2016-11-04', 12.50,
	'1 year 2 months 3 days 4 hours 5 minutes 6.78 seconds')`

// TestDebeziumColumnValues places a column of each temporal type, a
// numeric and an interval in headers (SimpleHeaderConverter, Kafka
// Connect's default) and a date and time in the envelope (JsonConverter)
// for each time.precision.mode outboxrelay accepts, with
// decimal.handling.mode and interval.handling.mode, and compares each
// with what Debezium writes. The expected values follow Debezium's
// converters, cited in debezium/temporal_test.go (TestModeColumns) beside
// the same values; in short:
//   - timestamptz padded to its scale since DBZ-6163 (6, or 3 for
//     timestamptz(3)), every mode; timetz in UTC, not padded;
//   - adaptive: time MicroTime (µs), time(3) Time (ms), timestamp
//     MicroTimestamp, date days; adaptive_time_microseconds: time(3)
//     MicroTime too; connect: Kafka Connect's Time, Timestamp and Date,
//     java.util.Dates that SimpleHeaderConverter writes with
//     Values.dateFormatFor (a UTC JVM) and JsonConverter as numbers;
//   - numeric(10,2) 12.50: "12.50" (string), 12.5 (double);
//   - interval: MicroDuration.durationMicros (numeric) or
//     Interval.toIsoString (string).
//
// The records start with the __debezium.context.* headers unless
// extended.headers.enabled is false.
func TestDebeziumColumnValues(t *testing.T) {
	const placement = `"transforms.outbox.table.fields.additional.placement": "type:header:eventType,tz:header,tz3:header,ttz:header,ti:header,ti3:header,ts:header,d:header,amount:header,dur:header,d:envelope,ti3:envelope"`
	value := func(dName, tiName, tiType string, d, ti int64) string {
		return `{"schema":{"type":"struct","fields":[` +
			`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
			`{"type":"int32","optional":true,"name":"` + dName + `","version":1,"field":"d"},` +
			`{"type":"` + tiType + `","optional":true,"name":"` + tiName + `","version":1,"field":"ti3"}],` +
			`"optional":false,"name":"dbserver1.inventory.outboxevent.Order.Value"},` +
			fmt.Sprintf(`"payload":{"payload":"{\"seq\": 1}","d":%d,"ti3":%d}}`, d, ti)
	}
	common := map[string]string{"tz": "2024-03-04T05:06:07.500000Z", "tz3": "2024-03-04T05:06:07.500Z", "ttz": "11:51:30.123789Z"}
	for _, tc := range []struct {
		name, extra string
		headers     map[string]string
		value       string
		context     bool
	}{
		{name: "adaptive", extra: `, "decimal.handling.mode": "string"`, context: true,
			headers: map[string]string{"ti": "49890123456", "ti3": "49890123", "ts": "1478267490123456", "d": "17109", "amount": "12.50", "dur": "37091106780000"},
			value:   value("io.debezium.time.Date", "io.debezium.time.Time", "int32", 17109, 49890123)},
		{name: "adaptive_time_microseconds", extra: `, "time.precision.mode": "adaptive_time_microseconds", "decimal.handling.mode": "double", "interval.handling.mode": "string", "extended.headers.enabled": "false"`,
			headers: map[string]string{"ti": "49890123456", "ti3": "49890123000", "ts": "1478267490123456", "d": "17109", "amount": "12.5", "dur": "P1Y2M3DT4H5M6.78S"},
			value:   value("io.debezium.time.Date", "io.debezium.time.MicroTime", "int64", 17109, 49890123000)},
		{name: "connect", extra: `, "time.precision.mode": "connect", "decimal.handling.mode": "string"`, context: true,
			headers: map[string]string{"ti": "13:51:30.123Z", "ti3": "13:51:30.123Z", "ts": "2016-11-04T13:51:30.123Z", "d": "2016-11-04", "amount": "12.50", "dur": "37091106780000"},
			value:   value("org.apache.kafka.connect.data.Date", "org.apache.kafka.connect.data.Time", "int32", 17109, 49890123)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			pgURL, pool, slot := debeziumDatabase(ctx, t, valuesDDL)
			if _, err := pool.Exec(ctx, valuesRow); err != nil {
				t.Fatal(err)
			}
			_, brokers := testenv.Kafka(t)
			// exampleConnector ends with the example's placement; this
			// test's comes after it, and the later key wins.
			p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, tc.extra+", "+placement),
				"OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
			r := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 1)[0]
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d:\n%s", code, p.out.String())
			}
			want := map[string]string{}
			for k, v := range common {
				want[k] = v
			}
			for k, v := range tc.headers {
				want[k] = v
			}
			for k, v := range want {
				if got := header(r, k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if string(r.Value) != tc.value {
				t.Errorf("value\n got %s\nwant %s", r.Value, tc.value)
			}
			var keys []string
			for _, h := range r.Headers {
				keys = append(keys, h.Key)
			}
			ctxKeys := []string{"__debezium.context.connectorLogicalName", "__debezium.context.taskId", "__debezium.context.connectorName", "__debezium.context.runId"}
			if !tc.context {
				if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "__debezium.context.") }) {
					t.Errorf("headers %v; extended.headers.enabled=false writes no context headers", keys)
				}
				return
			}
			if len(keys) < 4 || !slices.Equal(keys[:4], ctxKeys) {
				t.Fatalf("headers %v; want %v first", keys, ctxKeys)
			}
			runID := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
			if string(r.Headers[0].Value) != "dbserver1" || string(r.Headers[1].Value) != "0" || string(r.Headers[2].Value) != "postgresql" || !runID.Match(r.Headers[3].Value) {
				t.Errorf("context headers %q %q %q %q; want dbserver1 (topic.prefix), 0, postgresql and a version 7 UUID",
					r.Headers[0].Value, r.Headers[1].Value, r.Headers[2].Value, r.Headers[3].Value)
			}
		})
	}
}
