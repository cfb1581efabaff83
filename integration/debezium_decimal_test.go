package integration

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The example's outbox table with a numeric(10,2) and an unconstrained
// numeric.
var decimalDDL = strings.Replace(outboxEventDDL, "payload       jsonb", "payload       jsonb,\n\tamount numeric(10,2), ratio numeric", 1)

// TestDebeziumPreciseNumeric runs connectors with decimal.handling.mode
// left at Debezium's default, precise, and a numeric(10,2) and an
// unconstrained numeric each placed in a header and in the envelope, and
// compares the records with Debezium's. PostgresValueConverter types
// numeric(10,2) as Connect's Decimal (scale 2, connect.decimal.precision
// 10) with the BigDecimal 12.50, unscaled 1250 (04 e2), and the
// unconstrained numeric as io.debezium.data.VariableScaleDecimal, here
// {scale 4, value 101111 (01 8a f7)} of 10.1111
// (AbstractRecordsProducerTest's dvs); debezium/decimal_test.go cites
// each rule beside the same values. Then:
//   - SimpleHeaderConverter writes the Decimal by BigDecimal.toString,
//     12.50, and the struct as {"scale":4,"value":"AYr3"} (Values.append,
//     bytes in base64);
//   - JsonConverter (schemas on) writes the Decimal as base64 of its bytes
//     (decimal.format BASE64, the default) with its parameters in the
//     schema, the struct as an object;
//   - AvroConverter registers bytes with logicalType decimal, scale 2 and
//     precision 10, and the record VariableScaleDecimal (AvroData.
//     fromConnectSchema; AvroDataTest.createDecimalSchema), and writes
//     the bytes;
//   - JsonSchemaConverter registers a string with connect.type bytes,
//     the Decimal's name as title and its connect.parameters, and an
//     object for VariableScaleDecimal (JsonSchemaData, decimal.format
//     BASE64), and writes the bytes in base64.
//
// A NaN in the unconstrained column fails in Debezium
// (SpecialValueDecimal.fromLogical throws in precise mode); here it is
// that event's error, which goes to the dead letter topic, and the events
// around it arrive.
func TestDebeziumPreciseNumeric(t *testing.T) {
	const placement = `, "transforms.outbox.table.fields.additional.placement": "type:header:eventType,amount:header,ratio:header,amount:envelope,ratio:envelope"`
	const first, nan, last = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003"
	const decimalSchema = `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"}`
	const vsdSchema = `{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],` +
		`"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal"`
	jsonValue := func(amount, ratio string) string {
		return `{"schema":{"type":"struct","fields":[` +
			`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
			decimalSchema + `,"field":"amount"},` + vsdSchema + `,"field":"ratio"}],` +
			`"optional":false,"name":"dbserver1.inventory.outboxevent.Order.Value"},` +
			`"payload":{"payload":"{\"seq\": 1}","amount":` + amount + `,"ratio":` + ratio + `}}`
	}
	const avroSchema = `{"type":"record","name":"Value","namespace":"dbserver1.inventory.outboxevent.Order","fields":[` +
		`{"name":"payload","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}],"default":null},` +
		`{"name":"amount","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},` +
		`{"name":"ratio","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],` +
		`"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null}],` +
		`"connect.name":"dbserver1.inventory.outboxevent.Order.Value"}`
	// JsonSchemaData (decimal_test.go, TestJSONSchemaPreciseNumeric): the
	// properties in the order of the HashMap everit's ObjectSchema.Builder
	// put them in, a table of 16 (javahash.go): amount, payload, ratio.
	// Confluent's code, built and run once, gives this text.
	const jsonSRSchema = `{"type":"object","title":"dbserver1.inventory.outboxevent.Order.Value","properties":{` +
		`"amount":{"connect.index":1,"oneOf":[{"type":"null"},{"type":"string","title":"org.apache.kafka.connect.data.Decimal","connect.version":1,"connect.type":"bytes","connect.parameters":{"scale":"2","connect.decimal.precision":"10"}}]},` +
		`"payload":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]},` +
		`"ratio":{"connect.index":2,"oneOf":[{"type":"null"},{"type":"object","title":"io.debezium.data.VariableScaleDecimal","description":"Variable scaled decimal","connect.version":1,"properties":{` +
		`"scale":{"type":"integer","connect.index":0,"connect.type":"int32"},"value":{"type":"string","connect.index":1,"connect.type":"bytes"}}}]}}}`
	for _, tc := range []struct {
		name string
		// class is the value converter's, with the registry; "" for
		// JsonConverter.
		class string
		// values are the first and last events' values (JsonConverter).
		values map[string]string
	}{
		{name: "JsonConverter", values: map[string]string{
			first: jsonValue(`"BOI="`, `{"scale":4,"value":"AYr3"}`),
			// 1.00: 100 (64); 22.0000 strips to {scale 0, value 22 (16)}.
			last: jsonValue(`"ZA=="`, `{"scale":0,"value":"Fg=="}`)}},
		{name: "AvroConverter", class: "io.confluent.connect.avro.AvroConverter"},
		{name: "JsonSchemaConverter", class: "io.confluent.connect.json.JsonSchemaConverter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			pgURL, pool, slot := debeziumDatabase(ctx, t, decimalDDL)
			for _, row := range []struct{ id, amount, ratio string }{{first, "12.50", "10.1111"}, {nan, "3", "NaN"}, {last, "1", "22.0000"}} {
				if _, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, 'Order', '1', 'OrderCreated', '2019-05-03 13:31:34.484', '{"seq": 1}', $2, $3)`,
					row.id, row.amount, row.ratio); err != nil {
					t.Fatal(err)
				}
			}
			_, brokers := testenv.Kafka(t)
			extra := placement
			var reg *testenv.Registry
			if tc.class != "" {
				reg = testenv.StartRegistry(t, "", "")
				extra += `, "value.converter": "` + tc.class + `", "value.converter.schema.registry.url": "` + reg.URL + `"`
			}
			p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, extra),
				"OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","), "OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC=outbox.deadletter")
			recs := testenv.Consume(ctx, t, brokers, []string{"Order.events", "outbox.deadletter"}, 3)
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d:\n%s", code, p.out.String())
			}
			byID := map[string]*kgo.Record{}
			for _, r := range recs {
				byID[header(r, "id")] = r
			}
			headers := map[string][2]string{first: {"12.50", `{"scale":4,"value":"AYr3"}`}, last: {"1.00", `{"scale":0,"value":"Fg=="}`}}
			for _, id := range []string{first, last} {
				r := byID[id]
				if r == nil || r.Topic != "Order.events" {
					t.Fatalf("event %s: %v, want a record on Order.events; got %d records", id, r, len(recs))
				}
				if got, want := [2]string{header(r, "amount"), header(r, "ratio")}, headers[id]; got != want {
					t.Errorf("event %s: headers amount, ratio %q, want %q", id, got, want)
				}
				if tc.class == "" && string(r.Value) != tc.values[id] {
					t.Errorf("event %s: value\n got %s\nwant %s", id, r.Value, tc.values[id])
				}
			}
			if strings.HasSuffix(tc.class, "JsonSchemaConverter") {
				if got := reg.Subjects()["Order.events-value"]; len(got) != 1 || got[0] != jsonSRSchema {
					t.Errorf("value subject holds %q, want the one schema\n%s", got, jsonSRSchema)
				}
				want := `{"payload":"{\"seq\": 1}","amount":"BOI=","ratio":{"scale":4,"value":"AYr3"}}`
				if v := byID[first].Value; len(v) < 5 || string(v[5:]) != want {
					t.Errorf("first event's JSON Schema value %q, want a 5-byte header then %s", v, want)
				}
			}
			if strings.HasSuffix(tc.class, "AvroConverter") {
				if got := reg.Subjects()["Order.events-value"]; len(got) != 1 || got[0] != avroSchema {
					t.Errorf("value subject holds %q, want the one schema\n%s", got, avroSchema)
				}
				// After the Confluent header: payload's branch 1 (02) and
				// its 10 bytes (14); amount's branch, 2 bytes, 04 e2;
				// ratio's branch, scale 4 (08), 3 bytes (06), 01 8a f7.
				want := append(append([]byte{2, 20}, `{"seq": 1}`...), 2, 4, 0x04, 0xe2, 2, 8, 6, 0x01, 0x8a, 0xf7)
				if v := byID[first].Value; len(v) < 5 || !bytes.Equal(v[5:], want) {
					t.Errorf("first event's Avro value % x, want a 5-byte header then % x", v, want)
				}
			}
			dl := byID[nan]
			if dl == nil || dl.Topic != "outbox.deadletter" {
				t.Fatalf("the NaN event: %v, want it on outbox.deadletter", dl)
			}
			for _, want := range []string{`column "ratio"`, "NaN", "decimal.handling.mode string"} {
				if e := header(dl, connector.HeaderError); !strings.Contains(e, want) {
					t.Errorf("the NaN event's %s header %q does not say %q", connector.HeaderError, e, want)
				}
			}
		})
	}
}

// With Confluent's ProtobufConverter, a numeric envelope field under
// precise is refused at start (outboxrelay does not write ProtobufData's
// confluent.type.Decimal), naming the column and the ways out, before any
// event.
func TestDebeziumPreciseNumericRefusedWithProtobuf(t *testing.T) {
	for _, class := range []string{"io.confluent.connect.protobuf.ProtobufConverter"} {
		t.Run(class[strings.LastIndexByte(class, '.')+1:], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			pgURL, _, slot := debeziumDatabase(ctx, t, decimalDDL)
			_, brokers := testenv.Kafka(t)
			reg := testenv.StartRegistry(t, "", "")
			extra := `, "transforms.outbox.table.fields.additional.placement": "amount:envelope", "value.converter": "` + class +
				`", "value.converter.schema.registry.url": "` + reg.URL + `"`
			p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, extra), "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
			if code := p.exit(t, 60*time.Second); code == 0 {
				t.Fatalf("outboxrelay exited with 0; want it to refuse the numeric envelope field:\n%s", p.out.String())
			}
			out := p.stopReason(t)
			for _, want := range []string{`envelope field amount column "amount" has type numeric`, "org.apache.kafka.connect.data.Decimal", "routing.decimal_handling"} {
				if !strings.Contains(out, want) {
					t.Errorf("the output does not say %q:\n%s", want, lastLines(out, 20))
				}
			}
			if n := len(reg.Subjects()); n != 0 {
				t.Errorf("%d subjects registered; want none", n)
			}
		})
	}
}
