package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The Avro schemas Confluent's AvroConverter registers for the Connect
// schemas Debezium gives the outbox records. Each fact is from
// AvroData.fromConnectSchema (confluentinc/schema-registry,
// avro-data/src/main/java/io/confluent/connect/avro/AvroData.java) with the
// converter's defaults (connect.meta.data=true,
// enhanced.avro.schema.support=false), and the text is in the order Avro's
// Schema.toString writes it, since that is the string the serializer
// registers (AbstractKafkaAvroSerializer, AvroSchema.canonicalString):
//
//   - [type] Connect STRING, BOOLEAN, INT32, INT64, FLOAT32, FLOAT64 and
//     BYTES become Avro string, boolean, int, long, float, double and bytes
//     (CONNECT_TYPES_TO_AVRO_TYPES and the switch in fromConnectSchema);
//     INT8 and INT16 become int with the property connect.type int8/int16
//     (CONNECT_TYPE_PROP, "Extra type annotation information for otherwise
//     lossy conversions").
//   - [props] a schema with a version gets connect.version, then one with
//     a default connect.default, then one with a name connect.name
//     (CONNECT_VERSION_PROP, CONNECT_DEFAULT_VALUE_PROP, CONNECT_NAME_PROP,
//     added in that order when connectMetaData); Avro writes a primitive
//     with properties as {"type":...,props}, and one without as "type".
//   - [optional] an optional schema is the union ["null", T] (or [T,
//     "null"] when it has a default), built after the properties, which
//     therefore sit on T ("we can't store any metadata on the actual
//     top-level schema when it's a union"); this holds at the top level
//     too, since fromConnectSchema(schema) passes ignoreOptional=false.
//   - [struct] a required STRUCT is a record named by splitName of the
//     Connect name: the namespace before the last dot (none without one),
//     the name after it; an unnamed one is
//     io.confluent.connect.avro.ConnectDefault. An optional STRUCT is
//     ["null", the record of nonOptional(schema)], the union carrying no
//     properties.
//   - [field] each field's default is its schema's default, else null when
//     the schema is optional (addAvroRecordField, JsonProperties.NULL_VALUE).
//   - [array] ARRAY is {"type":"array","items":...}, the items converted
//     with ignoreOptional=false, so optional items are a union too.
//   - [namespace] Avro's Schema.toString writes a record's namespace only
//     where it differs from the enclosing one, and "" for a record without
//     one inside a record with one (Schema.Name.writeName).
//
// The Connect schemas are Debezium's (see records_test.go): varchar NOT
// NULL is a required STRING, jsonb an optional STRING named
// io.debezium.data.Json version 1, text an optional STRING, bytea optional
// BYTES, smallint INT16, timestamp(6) INT64 named
// io.debezium.time.MicroTimestamp version 1; the envelope is a required
// STRUCT named <topic.prefix>.<schema>.<table>.<aggregate type>.Value with
// payload first; the expanded payload is an optional STRUCT named after the
// payload column, its nested objects named by their path.
const (
	// [type]: the key column, aggregateid varchar NOT NULL.
	avroKeySchema = `"string"`
	// [optional] around [props] on a named STRING.
	avroJSONBSchema  = `{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}`
	avroJSONBPayload = `["null",` + avroJSONBSchema + `]`
	// [optional] around [type].
	avroTextPayload  = `["null","string"]`
	avroByteaPayload = `["null","bytes"]`
	// The expanded order ([struct] optional, [field], [array], [type]
	// int for numbers that fit 32 bits, double for decimals).
	avroOrderRecord = `{"type":"record","name":"payload","fields":[` +
		`{"name":"id","type":["null","int"],"default":null},` +
		`{"name":"lineItems","type":["null",{"type":"array","items":["null",{"type":"record","name":"lineItems","namespace":"payload","fields":[` +
		`{"name":"id","type":["null","int"],"default":null},{"name":"item","type":["null","string"],"default":null},` +
		`{"name":"status","type":["null","string"],"default":null},{"name":"quantity","type":["null","int"],"default":null},` +
		`{"name":"totalPrice","type":["null","double"],"default":null}],"connect.name":"payload.lineItems"}]}],"default":null},` +
		`{"name":"orderDate","type":["null","string"],"default":null},` +
		`{"name":"customerId","type":["null","int"],"default":null}],"connect.name":"payload"}`
	avroOrderPayload = `["null",` + avroOrderRecord + `]`
)

// avroEnvelope is the value schema with the envelope fields eventType
// (type varchar NOT NULL), seq (smallint NOT NULL: [type] connect.type
// int16), created (timestamp NOT NULL: [props] on a named INT64) and note
// (text, optional: [field] default null), after a payload of the given
// Avro schema ([struct] required, named dbserver1.public.outbox.order.Value).
func avroEnvelope(payload string) string {
	return `{"type":"record","name":"Value","namespace":"dbserver1.public.outbox.order","fields":[` +
		`{"name":"payload","type":` + payload + `,"default":null},` +
		`{"name":"eventType","type":"string"},` +
		`{"name":"seq","type":{"type":"int","connect.type":"int16"}},` +
		`{"name":"created","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}},` +
		`{"name":"note","type":["null","string"],"default":null}],` +
		`"connect.name":"dbserver1.public.outbox.order.Value"}`
}

// avroCase is an outbox table with a payload column of one type, the
// Debezium options, and what the registry and the records must hold.
type avroCase struct {
	name     string
	payload  string // the payload column's type
	options  string // more connector options
	rows     []avroRow
	valueSub string // the value schema registered
}

// avroRow is an inserted row and the JSON its value decodes to (with the
// Avro unions taken off); "" for a null value.
type avroRow struct {
	id, aggregate, payload string // payload: an SQL literal
	want                   string
}

const envelopeOptions = `,
    "transforms.outbox.table.fields.additional.placement": "type:envelope:eventType,seq:envelope,created:envelope,note:envelope"`

func TestAvroSchemasAndRecords(t *testing.T) {
	b64 := func(b []byte) string { return `"` + base64.StdEncoding.EncodeToString(b) + `"` }
	env := func(payload string) string {
		return `{"payload":` + payload + `,"eventType":"OrderCreated","seq":7,"created":1556890294484000,"note":null}`
	}
	jsonbRows := []avroRow{
		{id1, "1", "'" + orderPayload + "'", jacksonQuoted(orderJSONB)},
		{id2, "1", "NULL", ""},
		{id3, "2", `'{"id": 2}'`, jacksonQuoted(`{"id": 2}`)},
	}
	textRows := []avroRow{
		{id1, "1", "'héllo, text'", `"héllo, text"`},
		{id2, "1", "NULL", ""},
		{id3, "2", "''", `""`},
	}
	byteaRows := []avroRow{
		{id1, "1", `'\x00ff10c3'`, b64([]byte{0, 0xff, 0x10, 0xc3})},
		{id2, "1", "NULL", ""},
		{id3, "2", `'\x'`, b64([]byte{})},
	}
	withEnvelope := func(rows []avroRow) []avroRow {
		out := make([]avroRow, len(rows))
		for i, r := range rows {
			out[i] = r
			p := r.want
			if p == "" {
				p = "null" // the envelope keeps a NULL payload as a null field
			}
			out[i].want = env(p)
		}
		return out
	}
	expanded := []avroRow{
		{id1, "1", "'" + orderPayload + "'", orderCompact},
		{id2, "1", "NULL", ""},
	}
	for _, tc := range []avroCase{
		{name: "jsonb", payload: "jsonb", rows: jsonbRows, valueSub: avroJSONBPayload},
		{name: "text", payload: "text", rows: textRows, valueSub: avroTextPayload},
		{name: "bytea", payload: "bytea", rows: byteaRows, valueSub: avroByteaPayload},
		{name: "jsonb with envelope fields", payload: "jsonb", options: envelopeOptions, rows: withEnvelope(jsonbRows), valueSub: avroEnvelope(avroJSONBPayload)},
		{name: "text with envelope fields", payload: "text", options: envelopeOptions, rows: withEnvelope(textRows), valueSub: avroEnvelope(avroTextPayload)},
		{name: "bytea with envelope fields", payload: "bytea", options: envelopeOptions, rows: withEnvelope(byteaRows), valueSub: avroEnvelope(avroByteaPayload)},
		{name: "expand.json.payload", payload: "jsonb", options: `,
    "transforms.outbox.table.expand.json.payload": "true"`, rows: expanded, valueSub: avroOrderPayload},
		{name: "expand.json.payload with envelope fields", payload: "jsonb", options: `,
    "transforms.outbox.table.expand.json.payload": "true"` + envelopeOptions,
			// A NULL payload is not expanded: its value would have the
			// column's schema, a second version of the subject, as under
			// Debezium; both rows here have the order's shape.
			rows: []avroRow{{id1, "1", "'" + orderPayload + "'", env(orderCompact)}, {id2, "2", "'" + orderPayload + "'", env(orderCompact)}},
			// [namespace]: the payload record has none inside the
			// envelope's, so Avro writes "".
			valueSub: avroEnvelope(`["null",` + avroOrderRecord[:len(`{"type":"record","name":"payload"`)] + `,"namespace":""` + avroOrderRecord[len(`{"type":"record","name":"payload"`):] + `]`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runAvroCase(t, tc)
		})
	}
}

func runAvroCase(t *testing.T, tc avroCase) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := testenv.StartRegistry(t, "relay", "s3cret")
	pgURL := testenv.Postgres(t)
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	slot := fmt.Sprintf("dbz_avro_%d", slotSeq.Add(1))
	ddl := `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL,
		type varchar(255) NOT NULL, seq smallint NOT NULL, created timestamp NOT NULL, note text, payload ` + tc.payload + `)`
	for _, sql := range []string{ddl, "CREATE PUBLICATION dbz_publication FOR ALL TABLES",
		"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, r := range tc.rows {
		sql := fmt.Sprintf(`INSERT INTO public.outbox VALUES ('%s', 'order', '%s', 'OrderCreated', 7, '2019-05-03 13:31:34.484', NULL, %s)`, r.id, r.aggregate, r.payload)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	_, brokers := testenv.Kafka(t)
	cfg := loadDebezium(t, connectorJSON(`,
    "key.converter": "io.confluent.connect.avro.AvroConverter",
    "key.converter.schema.registry.url": "`+reg.URL+`",
    "key.converter.basic.auth.credentials.source": "USER_INFO",
    "key.converter.basic.auth.user.info": "relay:s3cret",
    "value.converter": "io.confluent.connect.avro.AvroConverter",
    "value.converter.schema.registry.url": "`+reg.URL+`",
    "value.converter.basic.auth.credentials.source": "USER_INFO",
    "value.converter.basic.auth.user.info": "relay:s3cret"`+tc.options), pgURL, slot, brokers)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, cfg, testLogger(t)) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()

	const topic = "outbox.event.order"
	got := testenv.Consume(ctx, t, brokers, []string{topic}, len(tc.rows))
	assertNoMore(ctx, t, brokers, []string{topic}, len(tc.rows))

	// The subjects of TopicNameStrategy, each with the one schema the
	// converter would register.
	subjects := reg.Subjects()
	want := map[string][]string{topic + "-key": {avroKeySchema}, topic + "-value": {tc.valueSub}}
	if !reflect.DeepEqual(subjects, want) {
		t.Errorf("registered subjects:\n%s\nwant:\n%s", fmtSubjects(subjects), fmtSubjects(want))
	}
	// Each schema registered once, then taken from the cache.
	if n := reg.Requests("POST", "/subjects/"+topic+"-value/versions"); n != 1 {
		t.Errorf("the value schema was registered %d times, want once (cached)", n)
	}

	byID := map[string]*kgo.Record{}
	for _, r := range got {
		byID[idOf(r)] = r
	}
	for _, row := range tc.rows {
		r := byID[row.id]
		if r == nil {
			t.Errorf("no record for event %s", row.id)
			continue
		}
		key := decodeAvro(t, reg, r.Key)
		if key != `"`+row.aggregate+`"` {
			t.Errorf("event %s: key decodes to %s, want %q", row.id, key, row.aggregate)
		}
		if row.want == "" {
			if r.Value != nil {
				t.Errorf("event %s: value %x, want a null value for a NULL payload", row.id, r.Value)
			}
			continue
		}
		if got := decodeAvro(t, reg, r.Value); !jsonEqual(got, row.want) {
			t.Errorf("event %s: value decodes to\n%s\nwant\n%s", row.id, got, row.want)
		}
	}
}

func fmtSubjects(m map[string][]string) string {
	b, _ := json.MarshalIndent(m, "", "  ")
	return string(b)
}

// decodeAvro reads a record in the Confluent wire format with the schema
// the registry holds under its id, and returns it as JSON without the
// Avro union wrappers.
func decodeAvro(t *testing.T, reg *testenv.Registry, b []byte) string {
	t.Helper()
	if len(b) < 5 || b[0] != 0 {
		t.Fatalf("not the Confluent wire format (magic byte 0, 4-byte schema id): %x", b)
	}
	id := int(binary.BigEndian.Uint32(b[1:5]))
	text, ok := reg.Schema(id)
	if !ok {
		t.Fatalf("schema id %d is not in the registry", id)
	}
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatalf("registered schema %d does not parse: %v\n%s", id, err, text)
	}
	var v any
	if err := avro.Unmarshal(s, b[5:], &v); err != nil {
		t.Fatalf("decode with schema %d: %v", id, err)
	}
	out, err := json.Marshal(plainAvro(s, v))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// plainAvro takes the union wrappers hamba/avro decodes ({"name": value})
// off a decoded value, following its schema.
func plainAvro(s avro.Schema, v any) any {
	switch s := s.(type) {
	case *avro.UnionSchema:
		if v == nil {
			return nil
		}
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for name, inner := range m {
				for _, branch := range s.Types() {
					if unionName(branch) == name {
						return plainAvro(branch, inner)
					}
				}
			}
		}
		for _, branch := range s.Types() {
			if branch.Type() != avro.Null {
				return plainAvro(branch, v)
			}
		}
	case *avro.RecordSchema:
		m := v.(map[string]any)
		out := map[string]any{}
		for _, f := range s.Fields() {
			out[f.Name()] = plainAvro(f.Type(), m[f.Name()])
		}
		return out
	case *avro.ArraySchema:
		list := v.([]any)
		out := make([]any, len(list))
		for i, e := range list {
			out[i] = plainAvro(s.Items(), e)
		}
		return out
	}
	return v
}

func unionName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(s.Type())
}

func jsonEqual(a, b string) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader([]byte(a))), json.NewDecoder(bytes.NewReader([]byte(b)))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
