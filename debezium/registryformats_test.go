package debezium

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestRegistryFormats runs each Schema Registry format through the one
// writer they share: the schema is registered with the format's
// schemaType under the topic's subject, the record carries the magic
// byte, the id and (Protobuf) the message indexes; a registry that
// refuses the schema as incompatible is the event's error, and one that
// does not answer holds the record until the context ends, as for Avro.
func TestRegistryFormats(t *testing.T) {
	for _, tc := range []struct {
		format     schemaFormat
		schemaType string
		// header is what follows the schema id before the body.
		keyIndex, valueIndex []byte
	}{
		{avroFormat{}, "AVRO", nil, nil},
		{jsonSRFormat{}, "JSON", nil, nil},
		// MessageIndexes: the count and each index as zigzag varints,
		// [0] as one 0 (StringValue is wrappers.proto's 8th message).
		{protobufFormat{}, "PROTOBUF", []byte{2, 14}, []byte{0}},
	} {
		t.Run(tc.format.name(), func(t *testing.T) {
			reg := testenv.StartRegistry(t, "", "")
			cfg := RegistryConfig{URLs: []string{reg.URL}}
			cfg.setDefaults()
			a, err := newRegistrySerde(cfg, tc.format, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []struct {
				isKey bool
				s     *Schema
				v     any
				index []byte
			}{{true, convKey, "o-1", tc.keyIndex}, {false, envelopeSchema, envelopeValue(`{"a": 1}`), tc.valueIndex}} {
				b, err := a.encode(t.Context(), "outbox.event.order", r.isKey, r.s, r.v)
				if err != nil {
					t.Fatal(err)
				}
				id := int(binary.BigEndian.Uint32(b[1:5]))
				text, _ := reg.Schema(id)
				want, _ := tc.format.derive(r.s)
				if b[0] != 0 || text != want || reg.SchemaType(id) != tc.schemaType {
					t.Errorf("record %x: schema %d is %s %q, want magic 0 and the %s %q", b, id, reg.SchemaType(id), text, tc.schemaType, want)
				}
				if string(b[5:5+len(r.index)]) != string(r.index) {
					t.Errorf("message indexes %x, want %x", b[5:5+len(r.index)], r.index)
				}
			}
			subjects := reg.Subjects()
			if len(subjects["outbox.event.order-key"]) != 1 || len(subjects["outbox.event.order-value"]) != 1 {
				t.Errorf("subjects %v, want the key's and the value's", subjects)
			}

			reg.Reject("outbox.event.invoice-value", "TYPE_MISMATCH")
			other := &Schema{Type: TypeStruct, Name: "dbserver1.public.outbox.invoice.Value", Fields: []Field{{Name: "payload", Schema: optString}}}
			if _, err := a.encode(t.Context(), "outbox.event.invoice", false, other, &Struct{Schema: other, Values: []any{"x"}}); err != nil {
				t.Fatal(err)
			}
			changed := &Schema{Type: TypeStruct, Name: "dbserver1.public.outbox.invoice.Value", Fields: []Field{{Name: "payload", Schema: optInt64}}}
			_, err = a.encode(t.Context(), "outbox.event.invoice", false, changed, &Struct{Schema: changed, Values: []any{int64(1)}})
			var ne errNotEvent
			if err == nil || errors.As(err, &ne) || !strings.Contains(err.Error(), "incompatible") || !strings.Contains(err.Error(), "409") {
				t.Errorf("incompatible schema: %v; want the event's error saying 409 incompatible", err)
			}

			reg.Stop()
			ctx, cancel := context.WithCancel(t.Context())
			failures := 0
			a.state = func(err error) {
				if err != nil {
					if failures++; failures == 2 {
						cancel()
					}
				}
			}
			_, err = a.encode(ctx, "outbox.event.shipment", false, envelopeSchema, envelopeValue("{}"))
			if !errors.As(err, &ne) || !strings.Contains(err.Error(), "unreachable") || failures != 2 {
				t.Errorf("registry down: %v after %d failures; want it to wait, then stop with the context, not as the event's error", err, failures)
			}
		})
	}
}

// BenchmarkRegistryFormatsEncode is the per-record cost of each format
// once the schema's id is cached: an envelope of the shape the router
// builds anew for every record.
func BenchmarkRegistryFormatsEncode(b *testing.B) {
	for _, f := range []schemaFormat{avroFormat{}, jsonSRFormat{}, protobufFormat{}} {
		b.Run(f.name(), func(b *testing.B) {
			reg := testenv.StartRegistry(b, "", "")
			cfg := RegistryConfig{URLs: []string{reg.URL}}
			cfg.setDefaults()
			a, err := newRegistrySerde(cfg, f, f)
			if err != nil {
				b.Fatal(err)
			}
			payload := strings.Repeat(`{"a": 1}`, 60)
			for b.Loop() {
				s := *envelopeSchema
				if _, err := a.encode(b.Context(), "outbox.event.order", false, &s, &Struct{Schema: &s, Values: []any{payload, "OrderCreated"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzSchemaFormats derives the JSON Schema and the .proto of expanded
// payloads and writes their records: whatever the payload, no panic; the
// JSON Schema is JSON; a Protobuf record is well-formed wire format.
func FuzzSchemaFormats(f *testing.F) {
	for _, s := range []string{
		`{"a": 1, "b": [1, 2], "c": {"d": "x"}}`,
		`{"xs": [{"a": null}, {"a": 5}, {"b": true}]}`,
		`{"xs": [[{"a": 1}], [{"b": 2}]]}`,
		`{"c": {"c": {"c": 1}}, "cMessage": 2}`,
		`{"my-key": 1, "f": -0.0, "i": -2147483649, "e": {}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		s, v, err := expander{}.expand("payload", payload)
		if err != nil {
			return
		}
		text, err := jsonSRFormat{}.derive(s)
		if err != nil || !json.Valid([]byte(text)) {
			t.Fatalf("JSON Schema %q, %v", text, err)
		}
		if _, _, err := (jsonSRFormat{}).encode(nil, s, v); err != nil && !strings.Contains(err.Error(), "Infinity") {
			t.Logf("JSON record refused: %v", err)
		}
		plan, err := protoPlanOf(s)
		if err != nil {
			return // a name or shape ProtobufData fails on too
		}
		_, body, err := protobufFormat{}.encode(plan, s, v)
		if err != nil {
			return
		}
		for len(body) > 0 {
			_, _, n := protowire.ConsumeField(body)
			if n < 0 {
				t.Fatalf("the Protobuf record is not wire format at %x", body)
			}
			body = body[n:]
		}
	})
}
