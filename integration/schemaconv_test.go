package integration

import (
	"context"
	bin "encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The schemas Confluent's JsonSchemaConverter and ProtobufConverter
// register for Debezium's outbox example (inventory.outboxevent,
// topic.prefix dbserver1), derived from Confluent's sources
// (confluentinc/schema-registry):
//   - the key, aggregateid varchar NOT NULL, is a required Connect STRING:
//     JsonSchemaData.rawSchemaFromConnectSchema makes it a StringSchema,
//     {"type":"string"}; ProtobufData.descriptorFromConnectSchema makes a
//     root that is not a struct the google.protobuf.StringValue wrapper,
//     whose file, wrappers.proto, is the schema (message index 7);
//   - the payload, jsonb, is an optional STRING named io.debezium.data.Json,
//     version 1: a oneOf of null and the string, the name its title, the
//     version connect.version; StringValue again for Protobuf, the name
//     lost (ProtobufData writes no Connect name of a primitive);
//   - the envelope (type:envelope:eventType) is a required STRUCT named
//     <topic.prefix>.<schema>.<table>.<route-by>.Value: an object titled so,
//     each property with its connect.index, in HashMap order; for Protobuf
//     the name split at its last dot into the package and the message,
//     fields numbered from 1 in order;
//   - the expanded payload is an optional STRUCT named payload with an
//     optional INT32: a oneOf of null and the object, the int an "integer"
//     with connect.type int32; for Protobuf a message payload with no
//     package and an int32 field.
//
// The unit fixtures (debezium/jsonschema_test.go, protobuf_test.go) cite
// the rule behind each keyword. The JSON Schema texts are Confluent's, as
// its code gave them when built and run once (jsonschema_test.go says
// which versions).
const (
	jsonSRKey      = `{"type":"string"}`
	jsonSRPayload  = `{"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]}`
	jsonSREnvelope = `{"type":"object","title":"dbserver1.inventory.outboxevent.Order.Value","properties":{"payload":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]},"eventType":{"type":"string","connect.index":1}}}`
	jsonSRExpanded = `{"oneOf":[{"type":"null"},{"type":"object","title":"payload","properties":{"seq":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"integer","connect.type":"int32"}]}}}]}`

	protoEnvelope = `syntax = "proto3";
package dbserver1.inventory.outboxevent.Order;

message Value {
  string payload = 1;
  string eventType = 2;
}
`
	protoExpanded = `syntax = "proto3";

message payload {
  int32 seq = 1;
}
`
)

// protoWrappersFile begins wrappers.proto as ProtobufSchemaUtils.toString
// writes it.
const protoWrappersFile = "syntax = \"proto3\";\npackage google.protobuf;\n\noption java_package = \"com.google.protobuf\";\n"

// wireRecord is a record in the Confluent wire format: the schema id, the
// message indexes (Protobuf) and the body.
type wireRecord struct {
	id    int
	index []int64
	body  []byte
}

func decodeWire(t *testing.T, b []byte, protobuf bool) wireRecord {
	t.Helper()
	if len(b) < 5 || b[0] != 0 {
		t.Fatalf("not the Confluent wire format (magic byte 0, 4-byte schema id): %x", b)
	}
	r := wireRecord{id: int(bin.BigEndian.Uint32(b[1:5])), body: b[5:]}
	if protobuf {
		// MessageIndexes: a count and the indexes as zigzag varints; a
		// lone 0 is the first message.
		n, k := bin.Varint(r.body)
		r.body = r.body[k:]
		if n == 0 {
			r.index = []int64{0}
		}
		for range n {
			v, k := bin.Varint(r.body)
			r.index = append(r.index, v)
			r.body = r.body[k:]
		}
	}
	return r
}

// protoFields lists a message's fields as number=value, strings quoted.
func protoFields(t *testing.T, b []byte) string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag in %x", b)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			out = append(out, fmt.Sprintf("%d=%d", num, v))
			b = b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			out = append(out, fmt.Sprintf("%d=%q", num, v))
			b = b[n:]
		default:
			t.Fatalf("wire type %d in %x", typ, b)
		}
	}
	return strings.Join(out, " ")
}

// TestDebeziumSchemaRegistryConverters runs Debezium's outbox example with
// Confluent's JsonSchemaConverter and ProtobufConverter as key and value
// converters through --debezium-config: the schemas registered under
// Order.events-key and -value are those the converters derive, and the
// records decode to the row. A NULL payload is a JSON null record with
// the schema (JsonSchemaData gives a NullNode for a null of an optional
// schema) and a null record in Protobuf (ProtobufData gives null).
func TestDebeziumSchemaRegistryConverters(t *testing.T) {
	const (
		jsonClass  = "io.confluent.connect.json.JsonSchemaConverter"
		protoClass = "io.confluent.connect.protobuf.ProtobufConverter"
	)
	for _, tc := range []struct {
		name, class, extra   string
		envelope             bool
		keySchema, valSchema string
		key, value, null     string
		valIndex             int64
		// nullSchema is the NULL payload's value schema when it is not
		// valSchema: unexpanded, as a NULL is no JSON text.
		nullSchema string
	}{
		{name: "JSON Schema", class: jsonClass, keySchema: jsonSRKey, valSchema: jsonSRPayload,
			key: `"2"`, value: `"{\"seq\": 7}"`, null: "null"},
		{name: "JSON Schema, envelope", class: jsonClass, envelope: true, keySchema: jsonSRKey, valSchema: jsonSREnvelope,
			key: `"2"`, value: `{"payload":"{\"seq\": 7}","eventType":"OrderCreated"}`, null: `{"payload":null,"eventType":"OrderCreated"}`},
		{name: "JSON Schema, expanded", class: jsonClass, extra: `, "transforms.outbox.table.expand.json.payload": "true"`, keySchema: jsonSRKey, valSchema: jsonSRExpanded,
			key: `"2"`, value: `{"seq":7}`, null: "null", nullSchema: jsonSRPayload},
		{name: "Protobuf", class: protoClass, keySchema: protoWrappersFile, valSchema: protoWrappersFile, valIndex: 7,
			key: `1="2"`, value: `1="{\"seq\": 7}"`},
		{name: "Protobuf, envelope", class: protoClass, envelope: true, keySchema: protoWrappersFile, valSchema: protoEnvelope,
			key: `1="2"`, value: `1="{\"seq\": 7}" 2="OrderCreated"`, null: `2="OrderCreated"`},
		{name: "Protobuf, expanded", class: protoClass, extra: `, "transforms.outbox.table.expand.json.payload": "true"`, keySchema: protoWrappersFile, valSchema: protoExpanded,
			key: `1="2"`, value: `1=7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
			insertOutboxEvent(ctx, t, pool, 7)
			const nullID = "00000000-0000-4000-8000-000000000008"
			if _, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, 'Order', '3', 'OrderCreated', '2019-05-03 13:31:34.484', NULL)`, nullID); err != nil {
				t.Fatal(err)
			}
			_, brokers := testenv.Kafka(t)
			reg := testenv.StartRegistry(t, "", "")
			content := exampleConnector(pgURL, slot, fmt.Sprintf(`, "key.converter": %q, "key.converter.schema.registry.url": %q,
			"value.converter": %q, "value.converter.schema.registry.url": %q%s`, tc.class, reg.URL, tc.class, reg.URL, tc.extra))
			if tc.envelope {
				content = strings.Replace(content, `"type:header:eventType"`, `"type:envelope:eventType"`, 1)
			}
			p := runDebeziumBinary(t, "c.json", content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
			recs := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 2)
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d", code)
			}
			protobuf := tc.class == protoClass
			body := func(b []byte) string {
				if protobuf {
					return protoFields(t, b)
				}
				return string(b)
			}
			for _, r := range recs {
				i := 0
				if header(r, "id") == nullID {
					i = 1
				}
				if p := javaPartition(r.Key, partitions); r.Partition != p {
					t.Errorf("partition %d, the Java producer's is %d", r.Partition, p)
				}
				k := decodeWire(t, r.Key, protobuf)
				if text, _ := reg.Schema(k.id); !strings.HasPrefix(text, tc.keySchema) || (!protobuf && text != tc.keySchema) {
					t.Errorf("key schema %d:\n%s\nwant %s", k.id, text, tc.keySchema)
				}
				if protobuf && (len(k.index) != 1 || k.index[0] != 7) {
					t.Errorf("key message indexes %v, want [7] (StringValue)", k.index)
				}
				wantKey := strings.ReplaceAll(tc.key, "2", []string{"2", "3"}[i])
				if got := body(k.body); got != wantKey {
					t.Errorf("key %s, want %s", got, wantKey)
				}
				want := []string{tc.value, tc.null}[i]
				if i == 1 && want == "" {
					if r.Value != nil {
						t.Errorf("NULL payload: value %x, want a null record", r.Value)
					}
					continue
				}
				v := decodeWire(t, r.Value, protobuf)
				wantSchema := tc.valSchema
				if i == 1 && tc.nullSchema != "" {
					wantSchema = tc.nullSchema
				}
				if text, _ := reg.Schema(v.id); text != wantSchema && !(protobuf && tc.valIndex != 0 && strings.HasPrefix(text, wantSchema)) {
					t.Errorf("value schema %d:\n%s\nwant %s", v.id, text, wantSchema)
				}
				if want := map[bool]string{true: "PROTOBUF", false: "JSON"}[protobuf]; reg.SchemaType(v.id) != want || reg.SchemaType(k.id) != want {
					t.Errorf("schema types %s, %s; want %s", reg.SchemaType(k.id), reg.SchemaType(v.id), want)
				}
				if protobuf && (len(v.index) != 1 || v.index[0] != tc.valIndex) {
					t.Errorf("value message indexes %v, want [%d]", v.index, tc.valIndex)
				}
				if got := body(v.body); got != want {
					t.Errorf("value of %s: %s, want %s", header(r, "id"), got, want)
				}
			}
			subjects := reg.Subjects()
			versions := 1
			if tc.nullSchema != "" {
				versions = 2
			}
			if len(subjects["Order.events-key"]) != 1 || len(subjects["Order.events-value"]) != versions {
				t.Errorf("subjects %v, want one schema under Order.events-key and %d under Order.events-value", subjects, versions)
			}
		})
	}
}

// TestDebeziumProtobufIncompatible: a registry that refuses the value's
// schema as incompatible (409) stops the relay with the event's error,
// as it does for Avro (the same registry code): the row, the subject and
// the registry's message are named, and nothing is published.
func TestDebeziumProtobufIncompatible(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	id := insertOutboxEvent(ctx, t, pool, 7)
	_, brokers := testenv.Kafka(t)
	reg := testenv.StartRegistry(t, "relay", "s3cret")
	preRegister(t, reg, "Order.events-value", `{"type":"long"}`)
	reg.Reject("Order.events-value", "{errorType:'MESSAGE_REMOVED'}")
	content := exampleConnector(pgURL, slot, fmt.Sprintf(`, "value.converter": "io.confluent.connect.protobuf.ProtobufConverter",
	"value.converter.schema.registry.url": %q, "value.converter.basic.auth.credentials.source": "USER_INFO", "value.converter.basic.auth.user.info": "relay:s3cret"`, reg.URL))
	p := runDebeziumBinary(t, "c.json", content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	if code := p.exit(t, time.Minute); code == 0 {
		t.Fatal("outboxrelay exited with 0, want an error for the refused schema")
	}
	out := p.stopReason(t)
	for _, s := range []string{id, `"Order.events-value"`, "incompatible", "409", "MESSAGE_REMOVED"} {
		if !strings.Contains(out, s) {
			t.Errorf("the output does not say %q:\n%s", s, out)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("Order.events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if fs := cl.PollFetches(pctx); fs.NumRecords() != 0 {
		t.Errorf("%d records published, want none", fs.NumRecords())
	}
}
