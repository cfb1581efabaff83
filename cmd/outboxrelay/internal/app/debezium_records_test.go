package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The outbox table of Debezium's documentation, in public.
const outboxDDL = `CREATE TABLE public.outbox (
	id            uuid PRIMARY KEY,
	aggregatetype varchar(255) NOT NULL,
	aggregateid   varchar(255) NOT NULL,
	type          varchar(255) NOT NULL,
	payload       jsonb
)`

// orderPayload is the order of Debezium's outbox documentation, and
// orderJSONB the text PostgreSQL gives for it as jsonb (keys by length,
// then bytes; ", " and ": " separators), which is what Debezium reads.
const (
	orderPayload = `{"id": 1, "customerId": 123, "orderDate": "2019-01-31T12:13:01", "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}]}`
	orderJSONB   = `{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`
	// orderCompact is orderJSONB as Jackson writes the expanded payload:
	// no spaces, fields in the order inferred.
	orderCompact = `{"id":1,"lineItems":[{"id":1,"item":"Debezium in Action","status":"ENTERED","quantity":2,"totalPrice":39.98},{"id":2,"item":"Debezium for Dummies","status":"ENTERED","quantity":1,"totalPrice":29.99}],"orderDate":"2019-01-31T12:13:01","customerId":123}`
	// orderSchema is the schema Debezium infers for it (JsonSchemaData):
	// a struct named after the payload column, integers that fit 32 bits
	// as int32, decimals as double, array elements named by their path.
	orderSchema = `{"type":"struct","fields":[` +
		`{"type":"int32","optional":true,"field":"id"},` +
		`{"type":"array","items":{"type":"struct","fields":[` +
		`{"type":"int32","optional":true,"field":"id"},{"type":"string","optional":true,"field":"item"},` +
		`{"type":"string","optional":true,"field":"status"},{"type":"int32","optional":true,"field":"quantity"},` +
		`{"type":"double","optional":true,"field":"totalPrice"}],"optional":true,"name":"payload.lineItems"},"optional":true,"field":"lineItems"},` +
		`{"type":"string","optional":true,"field":"orderDate"},` +
		`{"type":"int32","optional":true,"field":"customerId"}],"optional":true,"name":"payload"}`
	// jsonbSchema is Debezium's schema of a nullable jsonb column.
	jsonbSchema = `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`
)

// jacksonQuoted is a string without control characters as Jackson writes
// it: quotes and backslashes escaped.
func jacksonQuoted(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

const (
	id1 = "4d47e190-0402-4048-bc2c-89dd54343cdc"
	id2 = "5e8e6f0c-3b5a-4a8e-9d0e-0e7b1b0f1a2b"
	id3 = "6f9f7a1d-4c6b-4b9f-8e1f-1f8c2c1a2b3c"
)

// insertOrder inserts the documentation's event with the given id.
func insertOrder(id string) string {
	return fmt.Sprintf(`INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', 'order', '1', 'OrderCreated', '%s')`, id, orderPayload)
}

// header is an expected record header; null for a null value.
type header struct {
	key, value string
	null       bool
}

// record is an expected Kafka record.
type record struct {
	topic string
	// partition -1 means the Java client's choice: murmur2 of the key
	// bytes modulo the partitions.
	partition int32
	key       string
	value     string
	nullValue bool
	headers   []header
	// timestamp in epoch ms; 0 means the commit time.
	timestamp int64
}

// recordCase is a Debezium configuration, rows committed to its outbox
// table, and the records Debezium would have written for them.
type recordCase struct {
	name string
	ddl  string
	// config is the Debezium file, with {{host}}, {{port}}, {{user}},
	// {{db}}, {{slot}} and {{brokers}} filled in.
	config string
	rows   []string
	want   []record
}

// connectorJSON is a Kafka Connect connector JSON with the connection
// filled in and the given options after it.
func connectorJSON(options string) string {
	return `{
  "name": "outbox-connector",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "database.hostname": "{{host}}",
    "database.port": "{{port}}",
    "database.user": "{{user}}",
    "database.password": "unused",
    "database.dbname": "{{db}}",
    "database.sslmode": "disable",
    "topic.prefix": "dbserver1",
    "plugin.name": "pgoutput",
    "slot.name": "{{slot}}",
    "table.include.list": "public.outbox",
    "tombstones.on.delete": "false",
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter"` + options + `
  }
}`
}

var recordCases = []recordCase{
	{
		// Debezium's outbox documentation shows this record: the value a
		// JSON string, since JsonConverter with schemas.enable=false
		// writes the jsonb column's text as a JSON string.
		name: "JsonConverter without schemas, as the documentation's example",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "transforms.outbox.table.field.event.timestamp": "created"`),
		ddl:  `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, created timestamp NOT NULL, payload jsonb)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '2019-05-03 13:31:34.484', '` + orderPayload + `')`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: `"1"`, value: jacksonQuoted(orderJSONB),
			headers: []header{{key: "id", value: id1}}, timestamp: 1556890294484}},
	},
	{
		// No converters in the connector: the worker's JsonConverter with
		// schemas, as in Debezium's images; key and value in the
		// {"schema":...,"payload":...} envelope.
		name:   "JsonConverter with schemas (the worker's default)",
		config: connectorJSON(``),
		ddl:    outboxDDL,
		rows:   []string{insertOrder(id1)},
		want: []record{{topic: "outbox.event.order", partition: -1,
			key:     `{"schema":{"type":"string","optional":false},"payload":"1"}`,
			value:   `{"schema":` + jsonbSchema + `,"payload":` + jacksonQuoted(orderJSONB) + `}`,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		name: "StringConverter",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "transforms.outbox.table.fields.additional.placement": "type:header:eventType,aggregateid:header"`),
		ddl:  outboxDDL,
		rows: []string{insertOrder(id1)},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: orderJSONB,
			headers: []header{{key: "id", value: id1}, {key: "eventType", value: "OrderCreated"}, {key: "aggregateid", value: "1"}}}},
	},
	{
		name: "JsonConverter without schemas, payload expanded",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "transforms.outbox.table.expand.json.payload": "true"`),
		ddl:  outboxDDL,
		rows: []string{insertOrder(id1)},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: orderCompact,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		name: "JsonConverter with schemas, payload expanded",
		config: connectorJSON(`,
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "transforms.outbox.table.expand.json.payload": "true"`),
		ddl:  outboxDDL,
		rows: []string{insertOrder(id1)},
		want: []record{{topic: "outbox.event.order", partition: -1,
			key:     `{"schema":{"type":"string","optional":false},"payload":"1"}`,
			value:   `{"schema":` + orderSchema + `,"payload":` + orderCompact + `}`,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		// An envelope field makes the value a struct: payload first, then
		// the field with its column's schema, named after topic.prefix,
		// the table and the route-by value.
		name: "envelope placement, JsonConverter with schemas",
		config: connectorJSON(`,
    "transforms.outbox.table.fields.additional.placement": "type:envelope:eventType"`),
		ddl:  outboxDDL,
		rows: []string{insertOrder(id1)},
		want: []record{{topic: "outbox.event.order", partition: -1,
			key: `{"schema":{"type":"string","optional":false},"payload":"1"}`,
			value: `{"schema":{"type":"struct","fields":[` +
				`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"string","optional":false,"field":"eventType"}],"optional":false,"name":"dbserver1.public.outbox.order.Value"},` +
				`"payload":{"payload":` + jacksonQuoted(orderJSONB) + `,"eventType":"OrderCreated"}}`,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		// StringConverter writes Struct.toString(): fields that are not
		// null, name=value.
		name: "envelope placement, StringConverter",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "transforms.outbox.table.fields.additional.placement": "type:envelope:eventType,aggregateid:envelope"`),
		ddl:  outboxDDL,
		rows: []string{insertOrder(id1)},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1",
			value:   "Struct{payload=" + orderJSONB + ",eventType=OrderCreated,aggregateid=1}",
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		// A bytea payload goes out as its bytes with ByteArrayConverter.
		name: "ByteArrayConverter, binary payload",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"`),
		ddl:  `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload bytea)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '\x00ff10'::bytea)`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: "\x00\xff\x10",
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		// An empty bytea is a byte array of length 0 to Debezium
		// (JdbcValueConverters.convertBinaryToBytes wraps the driver's
		// bytes), which ByteArrayConverter writes as an empty value; only
		// NULL makes a null value.
		name: "ByteArrayConverter, empty and NULL bytea",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"`),
		ddl: `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload bytea)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '\x'::bytea)`,
			`INSERT INTO public.outbox VALUES ('` + id2 + `', 'order', '2', 'OrderCreated', NULL)`},
		want: []record{
			{topic: "outbox.event.order", partition: -1, key: "1", value: "", headers: []header{{key: "id", value: id1}}},
			{topic: "outbox.event.order", partition: -1, key: "2", nullValue: true, headers: []header{{key: "id", value: id2}}},
		},
	},
	{
		// Debezium's pass-through converter writes the bytea payload's bytes
		// unchanged, whatever they are; an empty one is an empty value, NULL
		// a null value (BinaryDataConverter.fromConnectData).
		name: "BinaryDataConverter, arbitrary bytes",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "io.debezium.converters.BinaryDataConverter"`),
		ddl: `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload bytea)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '\x00ff00fe80c328'::bytea)`,
			`INSERT INTO public.outbox VALUES ('` + id2 + `', 'order', '2', 'OrderCreated', '\x'::bytea)`,
			`INSERT INTO public.outbox VALUES ('` + id3 + `', 'order', '3', 'OrderCreated', NULL)`},
		want: []record{
			{topic: "outbox.event.order", partition: -1, key: "1", value: "\x00\xff\x00\xfe\x80\xc3\x28", headers: []header{{key: "id", value: id1}}},
			{topic: "outbox.event.order", partition: -1, key: "2", value: "", headers: []header{{key: "id", value: id2}}},
			{topic: "outbox.event.order", partition: -1, key: "3", nullValue: true, headers: []header{{key: "id", value: id3}}},
		},
	},
	{
		// ByteBufferConverter, its name before Debezium 2.0, for key and
		// value: a bytea key column's bytes are the key, and the partition
		// murmur2 of them.
		name: "ByteBufferConverter, bytea key and payload",
		config: connectorJSON(`,
    "key.converter": "io.debezium.converters.ByteBufferConverter",
    "value.converter": "io.debezium.converters.ByteBufferConverter"`),
		ddl:  `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid bytea NOT NULL, type text NOT NULL, payload bytea)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '\x00fe', 'OrderCreated', '\x0a0b00'::bytea)`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "\x00\xfe", value: "\x0a\x0b\x00", headers: []header{{key: "id", value: id1}}}},
	},
	{
		// What is not bytes goes to delegate.converter.type, configured by
		// the options under it: a varchar key to StringConverter, a jsonb
		// payload to JsonConverter without schemas.
		name: "BinaryDataConverter delegating key and value",
		config: connectorJSON(`,
    "key.converter": "io.debezium.converters.BinaryDataConverter",
    "key.converter.delegate.converter.type": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "io.debezium.converters.BinaryDataConverter",
    "value.converter.delegate.converter.type": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.delegate.converter.type.schemas.enable": "false"`),
		ddl:  outboxDDL,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '{"a": 1}')`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: `"{\"a\": 1}"`, headers: []header{{key: "id", value: id1}}}},
	},
	{
		// Envelope fields make the value a struct, which is not bytes: the
		// delegate writes it, the bytea payload as base64 inside.
		name: "ByteBufferConverter delegating an envelope",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "io.debezium.converters.ByteBufferConverter",
    "value.converter.delegate.converter.type": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.delegate.converter.type.schemas.enable": "false",
    "transforms.outbox.table.fields.additional.placement": "type:envelope:eventType"`),
		ddl:  `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload bytea)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '\x00ff10'::bytea)`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: `{"payload":"AP8Q","eventType":"OrderCreated"}`,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		// JsonConverter writes bytes in base64.
		name: "JsonConverter without schemas, binary payload",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false"`),
		ddl:  `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload bytea)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '\x00ff10'::bytea)`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: `"AP8Q"`,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		// SimpleHeaderConverter writes numbers and booleans as Java prints
		// them; a NULL column is a header with a null value. The int
		// column also names the partition.
		name: "SimpleHeaderConverter types, partition placement",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
    "transforms.outbox.table.fields.additional.placement": "part:partition,part:header:shard,urgent:header,ratio:header,note:header"`),
		ddl: `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
			payload text, part integer, urgent boolean, ratio double precision, note text)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', 'hello', 5, true, 1e-7, NULL)`},
		want: []record{{topic: "outbox.event.order", partition: 5, key: "1", value: "hello",
			headers: []header{{key: "id", value: id1}, {key: "shard", value: "5"}, {key: "urgent", value: "true"}, {key: "ratio", value: "1.0E-7"}, {key: "note", null: true}}}},
	},
	{
		// route.topic.regex is matched against the whole route-by value;
		// a value it does not match is the topic as it is.
		name: "route.topic.regex and replacement",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "transforms.outbox.route.by.field": "type",
    "transforms.outbox.route.topic.regex": "(?<kind>[A-Z][a-z]+)(Created|Shipped)",
    "transforms.outbox.route.topic.replacement": "${kind}-events.$2"`),
		ddl: outboxDDL,
		rows: []string{
			`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '{}')`,
			`INSERT INTO public.outbox VALUES ('` + id2 + `', 'order', '2', 'Cancelled', '{}')`,
		},
		want: []record{
			{topic: "Order-events.Created", partition: -1, key: "1", value: "{}", headers: []header{{key: "id", value: id1}}},
			{topic: "Cancelled", partition: -1, key: "2", value: "{}", headers: []header{{key: "id", value: id2}}},
		},
	},
	{
		// An empty payload: a tombstone with route.tombstone.on.empty.payload;
		// without it, JsonConverter writes the null JSON value.
		name: "tombstone on empty payload",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "transforms.outbox.route.tombstone.on.empty.payload": "true"`),
		ddl: `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload text)`,
		rows: []string{
			`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderDeleted', NULL)`,
			`INSERT INTO public.outbox VALUES ('` + id2 + `', 'order', '2', 'OrderDeleted', '  ')`,
		},
		want: []record{
			{topic: "outbox.event.order", partition: -1, key: "1", nullValue: true, headers: []header{{key: "id", value: id1}}},
			{topic: "outbox.event.order", partition: -1, key: "2", nullValue: true, headers: []header{{key: "id", value: id2}}},
		},
	},
	{
		name: "null payload without tombstones",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false"`),
		ddl:  outboxDDL,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderDeleted', NULL)`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: "null", headers: []header{{key: "id", value: id1}}}},
	},
	{
		// The span context column, as an application's OpenTelemetry
		// Properties propagation writes it: its traceparent comes first.
		name: "tracing span context",
		config: connectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter"`),
		ddl: `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload text, tracingspancontext text)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', 'x',
			E'#Thu May 02 10:00:00 UTC 2024\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n')`},
		want: []record{{topic: "outbox.event.order", partition: -1, key: "1", value: "x",
			headers: []header{{key: "traceparent", value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, {key: "id", value: id1}}}},
	},
	{
		// Debezium Server writes key, value and headers with JsonConverter
		// by default, schemas included; the id column's schema carries the
		// placeholder default Debezium gives a function default.
		name: "Debezium Server application.properties, default formats",
		config: `debezium.sink.type=kafka
debezium.sink.kafka.producer.bootstrap.servers={{brokers}}
debezium.sink.kafka.producer.key.serializer=org.apache.kafka.common.serialization.StringSerializer
debezium.sink.kafka.producer.value.serializer=org.apache.kafka.common.serialization.StringSerializer
debezium.source.connector.class=io.debezium.connector.postgresql.PostgresConnector
debezium.source.offset.storage.file.filename=data/offsets.dat
debezium.source.database.hostname={{host}}
debezium.source.database.port={{port}}
debezium.source.database.user={{user}}
debezium.source.database.dbname={{db}}
debezium.source.database.sslmode=disable
debezium.source.topic.prefix=tutorial
debezium.source.plugin.name=pgoutput
debezium.source.slot.name={{slot}}
debezium.source.table.include.list=public.outbox
debezium.transforms=outbox
debezium.transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
debezium.transforms.outbox.table.field.event.timestamp=created
quarkus.log.console.json=false
`,
		ddl: `CREATE TABLE public.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype varchar(255) NOT NULL,
			aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, created timestamp(3) NOT NULL, payload jsonb)`,
		rows: []string{`INSERT INTO public.outbox VALUES ('` + id1 + `', 'order', '1', 'OrderCreated', '2019-05-03 13:31:34.484', '{"a": 1}')`},
		want: []record{{topic: "outbox.event.order", partition: -1,
			key:   `{"schema":{"type":"string","optional":false},"payload":"1"}`,
			value: `{"schema":` + jsonbSchema + `,"payload":"{\"a\": 1}"}`,
			headers: []header{{key: "id", value: `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1,` +
				`"default":"00000000-0000-0000-0000-000000000000"},"payload":"` + id1 + `"}`}},
			timestamp: 1556890294484}},
	},
}

// TestRecords runs each configuration through what run --debezium-config
// does (translation, the native configuration, the CDC relay) against a
// real PostgreSQL and an in-process broker, and compares every byte.
func TestRecords(t *testing.T) {
	for _, tc := range recordCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runRecordCase(t, tc)
		})
	}
}

var slotSeq atomic.Int64

func runRecordCase(t *testing.T, tc recordCase) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pgURL := testenv.Postgres(t)
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The slot and publication as Debezium creates them
	// (publication.autocreate.mode=all_tables).
	slot := fmt.Sprintf("dbz_records_%d", slotSeq.Add(1))
	for _, sql := range []string{tc.ddl, "CREATE PUBLICATION dbz_publication FOR ALL TABLES",
		"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var payloadText string
	if strings.Contains(tc.rows[0], orderPayload) {
		if err := conn.QueryRow(ctx, "SELECT $1::jsonb::text", orderPayload).Scan(&payloadText); err != nil || payloadText != orderJSONB {
			t.Fatalf("PostgreSQL writes the order as %q (%v); the expectations assume %q", payloadText, err, orderJSONB)
		}
	}
	before := time.Now()
	for _, sql := range tc.rows {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	after := time.Now()

	_, brokers := testenv.Kafka(t)
	cfg := loadDebezium(t, tc.config, pgURL, slot, brokers)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, cfg, testLogger(t)) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()

	topics := map[string]bool{}
	for _, w := range tc.want {
		topics[w.topic] = true
	}
	var topicList []string
	for tp := range topics {
		topicList = append(topicList, tp)
	}
	got := testenv.Consume(ctx, t, brokers, topicList, len(tc.want))
	assertNoMore(ctx, t, brokers, topicList, len(tc.want))
	byID := map[string]*kgo.Record{}
	for _, r := range got {
		byID[idOf(r)] = r
	}
	for _, w := range tc.want {
		id := idOf(&kgo.Record{Headers: toKgo(w.headers)})
		r := byID[id]
		if r == nil {
			t.Errorf("no record for event %s; got %d records", id, len(got))
			continue
		}
		compareRecord(t, w, r, before, after)
	}
}

// idOf is the event id of a record, whatever the header format.
func idOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "id" {
			if m := regexp.MustCompile(`"payload":"([^"]+)"`).FindSubmatch(h.Value); m != nil {
				return string(m[1])
			}
			return string(h.Value)
		}
	}
	return ""
}

func toKgo(hs []header) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = kgo.RecordHeader{Key: h.key}
		if !h.null {
			out[i].Value = []byte(h.value)
		}
	}
	return out
}

func compareRecord(t *testing.T, w record, r *kgo.Record, before, after time.Time) {
	t.Helper()
	if r.Topic != w.topic {
		t.Errorf("topic %q, want %q", r.Topic, w.topic)
	}
	wantPart := w.partition
	if wantPart < 0 {
		wantPart = javaPartition([]byte(w.key), 8)
	}
	if r.Partition != wantPart {
		t.Errorf("partition %d, want %d", r.Partition, wantPart)
	}
	if string(r.Key) != w.key {
		t.Errorf("key\n got %q\nwant %q", r.Key, w.key)
	}
	switch {
	case w.nullValue && r.Value != nil:
		t.Errorf("value %q, want null (a tombstone)", r.Value)
	case !w.nullValue && r.Value == nil:
		t.Errorf("value null, want %q", w.value)
	case !w.nullValue && string(r.Value) != w.value:
		t.Errorf("value\n got %q\nwant %q", r.Value, w.value)
	}
	wantH := toKgo(w.headers)
	r.Headers = checkContextHeaders(t, r.Headers)
	if len(r.Headers) != len(wantH) {
		t.Errorf("headers %s, want %s", fmtHeaders(r.Headers), fmtHeaders(wantH))
	} else {
		for i := range wantH {
			g, h := r.Headers[i], wantH[i]
			if g.Key != h.Key || !bytes.Equal(g.Value, h.Value) || (g.Value == nil) != (h.Value == nil) {
				t.Errorf("headers %s, want %s", fmtHeaders(r.Headers), fmtHeaders(wantH))
				break
			}
		}
	}
	ts := r.Timestamp.UnixMilli()
	if w.timestamp != 0 {
		if ts != w.timestamp {
			t.Errorf("timestamp %d, want %d", ts, w.timestamp)
		}
	} else if ts < before.UnixMilli()-1000 || ts > after.UnixMilli()+1000 {
		t.Errorf("timestamp %s is not the commit time (between %s and %s)", r.Timestamp, before, after)
	}
}

func fmtHeaders(hs []kgo.RecordHeader) string {
	var parts []string
	for _, h := range hs {
		if h.Value == nil {
			parts = append(parts, h.Key+"=null")
		} else {
			parts = append(parts, fmt.Sprintf("%s=%q", h.Key, h.Value))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// assertNoMore checks the topics hold exactly n records.
func assertNoMore(ctx context.Context, t *testing.T, brokers, topics []string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Give a stray record time to land before counting.
	time.Sleep(200 * time.Millisecond)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(n) {
		t.Errorf("the topics hold %d records, want %d", total, n)
	}
}

// loadDebezium does what run --debezium-config does with a file: parse,
// translate (config providers resolved), and load the native config with
// the environment on top.
func loadDebezium(t *testing.T, text, pgURL, slot string, brokers []string) *config.Config {
	t.Helper()
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	text = strings.NewReplacer("{{host}}", u.Hostname(), "{{port}}", u.Port(), "{{user}}", u.User.Username(),
		"{{db}}", strings.TrimPrefix(u.Path, "/"), "{{slot}}", slot, "{{brokers}}", strings.Join(brokers, ",")).Replace(text)
	f, err := debezium.ParseFile([]byte(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	tr := debezium.Translate(f, debezium.Env{})
	if err := tr.Err(); err != nil {
		t.Fatalf("translate: %v", err)
	}
	y, err := tr.YAML(true)
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"OUTBOXRELAY_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"OUTBOXRELAY_HTTP_LISTEN=127.0.0.1:0",
		"OUTBOXRELAY_CDC_STATUS_INTERVAL=200ms",
		"OUTBOXRELAY_SHUTDOWN_TIMEOUT=5s",
	}
	cfg, err := config.LoadTranslated(y, "", environ)
	if err != nil {
		t.Fatalf("load translated config: %v\n%s", err, y)
	}
	return cfg
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// javaPartition is the Java client's partition for a key: murmur2, made
// positive, modulo the partition count (Kafka's Utils.murmur2).
func javaPartition(key []byte, partitions int32) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
	)
	h := seed ^ uint32(len(key))
	n := len(key) &^ 3
	for i := 0; i < n; i += 4 {
		k := uint32(key[i]) | uint32(key[i+1])<<8 | uint32(key[i+2])<<16 | uint32(key[i+3])<<24
		k *= m
		k ^= k >> 24
		k *= m
		h = h*m ^ k
	}
	switch len(key) % 4 {
	case 3:
		h ^= uint32(key[n+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[n+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[n])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h&0x7fffffff) % partitions
}

// runIDv7 is the text of a version 7 UUID, UUIDUtils.generateNewUUID's.
var runIDv7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// checkContextHeaders checks the __debezium.context.* headers that every
// record starts with while extended.headers.enabled is on (by default, in
// Debezium 3.2 and later, which the cases leave it): the logical name
// (topic.prefix), task 0, the plugin name, a version 7 run id
// (DebeziumHeaderProducer.contextHeaders), each a string the header
// converter wrote. It returns the headers after them.
func checkContextHeaders(t *testing.T, hs []kgo.RecordHeader) []kgo.RecordHeader {
	t.Helper()
	text := func(v []byte) string {
		var env struct {
			Payload string `json:"payload"`
		}
		switch {
		case bytes.HasPrefix(v, []byte(`{"schema":{"type":"string","optional":false},"payload":`)):
			if err := json.Unmarshal(v, &env); err == nil {
				return env.Payload
			}
		case bytes.HasPrefix(v, []byte(`"`)):
			var s string
			if err := json.Unmarshal(v, &s); err == nil {
				return s
			}
		}
		return string(v)
	}
	want := []string{"connectorLogicalName", "taskId", "connectorName", "runId"}
	if len(hs) < len(want) {
		t.Errorf("headers %s, want the %d context headers first", fmtHeaders(hs), len(want))
		return hs
	}
	for i, k := range want {
		got, v := hs[i].Key, text(hs[i].Value)
		ok := got == "__debezium.context."+k
		switch k {
		case "connectorLogicalName":
			ok = ok && (v == "dbserver1" || v == "tutorial")
		case "taskId":
			ok = ok && v == "0"
		case "connectorName":
			ok = ok && v == "postgresql"
		case "runId":
			ok = ok && runIDv7.MatchString(v)
		}
		if !ok {
			t.Errorf("header %d is %s=%q, want __debezium.context.%s as DebeziumHeaderProducer writes it", i, got, v, k)
		}
	}
	return hs[len(want):]
}
