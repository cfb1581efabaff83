package debezium

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// envelopeSchema is an envelope value: a required struct, which the record
// strategies can name a subject after.
var envelopeSchema = &Schema{Type: TypeStruct, Name: "dbserver1.public.outbox.order.Value", Fields: []Field{
	{Name: "payload", Schema: &Schema{Type: TypeString, Optional: true, Name: nameJSON, Version: 1}},
	{Name: "eventType", Schema: &Schema{Type: TypeString}},
}}

func envelopeValue(payload string) *Struct {
	return &Struct{Schema: envelopeSchema, Values: []any{payload, "OrderCreated"}}
}

func newTestSerde(t *testing.T, reg *testenv.Registry, cfg RegistryConfig) *registrySerde {
	t.Helper()
	cfg.URLs = []string{reg.URL}
	cfg.RetryMin, cfg.RetryMax = 10*time.Millisecond, 50*time.Millisecond
	cfg.setDefaults()
	if errs := cfg.validate(); len(errs) > 0 {
		t.Fatalf("config: %v", errors.Join(errs...))
	}
	a, err := newAvroSerde(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAvroSubjects registers an envelope value and a key under each
// subject name strategy (Confluent's TopicNameStrategy: <topic>-key and
// <topic>-value; RecordNameStrategy: the record's full name;
// TopicRecordNameStrategy: <topic>-<full name>).
func TestAvroSubjects(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		want     string
	}{
		{"", "outbox.event.order-value"},
		{SubjectTopic, "outbox.event.order-value"},
		{SubjectRecord, "dbserver1.public.outbox.order.Value"},
		{SubjectTopicRecord, "outbox.event.order-dbserver1.public.outbox.order.Value"},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			reg := testenv.StartRegistry(t, "", "")
			a := newTestSerde(t, reg, RegistryConfig{SubjectNameStrategy: tc.strategy})
			if _, err := a.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue(`{"a": 1}`)); err != nil {
				t.Fatal(err)
			}
			subjects := reg.Subjects()
			if len(subjects) != 1 || len(subjects[tc.want]) != 1 {
				t.Errorf("subjects %v, want one version under %s", subjects, tc.want)
			}
		})
	}
	reg := testenv.StartRegistry(t, "", "")
	a := newTestSerde(t, reg, RegistryConfig{SubjectNameStrategy: SubjectRecord})
	_, err := a.encode(t.Context(), "outbox.event.order", false, &Schema{Type: TypeString, Optional: true}, "x")
	if err == nil || !strings.Contains(err.Error(), "not one") {
		t.Errorf("record strategy with a string value: %v, want an error saying it is no record", err)
	}
}

// TestAvroWireFormat checks the Confluent wire format (magic byte 0, the
// schema id as 4 bytes big endian, the Avro binary encoding) and that each
// schema is registered once per subject, then taken from the cache.
func TestAvroWireFormat(t *testing.T) {
	reg := testenv.StartRegistry(t, "", "")
	a := newTestSerde(t, reg, RegistryConfig{})
	var ids []int
	for _, p := range []string{`{"a": 1}`, `{"a": 2}`} {
		b, err := a.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue(p))
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 0 {
			t.Fatalf("magic byte %d, want 0", b[0])
		}
		id := int(binary.BigEndian.Uint32(b[1:5]))
		ids = append(ids, id)
		text, _ := reg.Schema(id)
		want, err := avro.Marshal(avro.MustParse(text), map[string]any{"payload": map[string]any{"string": p}, "eventType": "OrderCreated"})
		if err != nil {
			t.Fatal(err)
		}
		if string(b[5:]) != string(want) {
			t.Errorf("body %x, want %x", b[5:], want)
		}
	}
	if ids[0] != ids[1] {
		t.Errorf("schema ids %v differ for one schema", ids)
	}
	if n := reg.Requests("POST", "/subjects/"); n != 1 {
		t.Errorf("%d registrations, want 1 (cached)", n)
	}
	if b, err := a.encode(t.Context(), "outbox.event.order", false, &Schema{Type: TypeString, Optional: true}, nil); err != nil || b != nil {
		t.Errorf("a null value: %x, %v; want a null record and no registration", b, err)
	}
}

// TestAvroLookupOnly covers auto_register false: a schema not under its
// subject is this event's error (40401), one there is written with its
// id; with use_latest_version the subject's latest schema and id are used.
func TestAvroLookupOnly(t *testing.T) {
	reg := testenv.StartRegistry(t, "", "")
	lookup := newTestSerde(t, reg, RegistryConfig{NoAutoRegister: true})
	_, err := lookup.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	var ne errNotEvent
	if err == nil || errors.As(err, &ne) || !strings.Contains(err.Error(), `not registered under subject "outbox.event.order-value"`) || !strings.Contains(err.Error(), "40401") {
		t.Fatalf("lookup of a missing subject: %v; want the event's error naming the subject and 40401", err)
	}
	register := newTestSerde(t, reg, RegistryConfig{})
	b1, err := register.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	if err != nil {
		t.Fatal(err)
	}
	lookup = newTestSerde(t, reg, RegistryConfig{NoAutoRegister: true})
	b2, err := lookup.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	if err != nil || string(b1) != string(b2) {
		t.Fatalf("looked-up record %x (%v), want %x", b2, err, b1)
	}
	latest := newTestSerde(t, reg, RegistryConfig{NoAutoRegister: true, UseLatestVersion: true})
	b3, err := latest.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	if err != nil || string(b3) != string(b1) {
		t.Fatalf("use_latest_version record %x (%v), want %x", b3, err, b1)
	}
	if n := reg.Requests("GET", "/subjects/outbox.event.order-value/versions/latest"); n != 1 {
		t.Errorf("%d requests for the latest version, want 1", n)
	}
}

// TestAvroRefusedCredentials: a registry that refuses the relay's login
// stops the relay (a permanent error that is not the event's), naming the
// status and what to check; every event would fail alike.
func TestAvroRefusedCredentials(t *testing.T) {
	reg := testenv.StartRegistry(t, "relay", "right")
	a := newTestSerde(t, reg, RegistryConfig{Username: "relay", Password: "wrong"})
	_, err := a.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	var ne errNotEvent
	if !errors.As(err, &ne) || !connector.IsPermanent(err) || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "basic.auth.user.info") {
		t.Fatalf("refused login: %v; want a permanent error, not the event's, saying 401 and what to check", err)
	}
}

// TestAvroUnreachableEndsWithContext: while the registry does not answer,
// encode waits; it returns, as no error of the event, once the context
// ends, and reports each failure to the state callback.
func TestAvroUnreachableEndsWithContext(t *testing.T) {
	reg := testenv.StartRegistry(t, "", "")
	reg.Stop()
	a := newTestSerde(t, reg, RegistryConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	failures := 0
	a.state = func(err error) {
		if err != nil {
			failures++
			if failures == 3 {
				cancel()
			}
		}
	}
	_, err := a.encode(ctx, "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	var ne errNotEvent
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("encode while the registry is down and the relay stops: %v", err)
	}
	if failures != 3 {
		t.Errorf("%d failures reported, want 3 (the context ended after the third)", failures)
	}
}

func TestRegistryConfigValidate(t *testing.T) {
	base := func() RouterConfig {
		return RouterConfig{PostgresURL: "postgres://x", ValueFormat: FormatAvro, Registry: RegistryConfig{URLs: []string{"http://r:8081"}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*RouterConfig)
		want []string // each must appear; none: valid
	}{
		{"valid", func(*RouterConfig) {}, nil},
		{"no url", func(c *RouterConfig) { c.Registry.URLs = nil }, []string{"needs schema_registry.url"}},
		{"bad url", func(c *RouterConfig) { c.Registry.URLs = []string{"r:8081"} }, []string{`"r:8081" is not an http`}},
		{"strategy", func(c *RouterConfig) { c.Registry.SubjectNameStrategy = "custom" }, []string{`"custom" is not topic, record or topic_record`}},
		{"latest with register", func(c *RouterConfig) { c.Registry.UseLatestVersion = true }, []string{"use_latest_version needs auto_register false"}},
		{"record strategy, key and plain value", func(c *RouterConfig) {
			c.KeyFormat, c.Registry.SubjectNameStrategy = FormatAvro, SubjectRecord
		}, []string{"the key is a column", "without envelope fields the value is no record"}},
		{"record strategy with an envelope", func(c *RouterConfig) {
			c.Registry.SubjectNameStrategy, c.AdditionalFields = SubjectTopicRecord, []string{"type:envelope:eventType"}
		}, nil},
		{"latest with protobuf", func(c *RouterConfig) {
			c.ValueFormat, c.Registry.NoAutoRegister, c.Registry.UseLatestVersion = FormatProtobuf, true, true
		}, []string{"use_latest_version is not supported with format protobuf"}},
		{"json_sr and protobuf with a registry", func(c *RouterConfig) { c.KeyFormat, c.ValueFormat = FormatJSONSR, FormatProtobuf }, nil},
		{"json_sr without a registry", func(c *RouterConfig) { c.ValueFormat, c.Registry.URLs = FormatJSONSR, nil }, []string{"needs schema_registry.url"}},
		{"bad CA file", func(c *RouterConfig) { c.Registry.TLS.CAFile = "/nonexistent.pem" }, []string{"schema_registry.tls.ca_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not say %q", err, w)
				}
			}
		})
	}
}

// BenchmarkAvroEncode is the per-record cost of the avro format once the
// schema's id is cached: the schema text, the cache lookup, the Avro
// encoding.
func BenchmarkAvroEncode(b *testing.B) {
	reg := testenv.StartRegistry(b, "", "")
	cfg := RegistryConfig{URLs: []string{reg.URL}}
	cfg.setDefaults()
	a, err := newAvroSerde(cfg)
	if err != nil {
		b.Fatal(err)
	}
	payload := strings.Repeat(`{"a": 1}`, 60)
	for b.Loop() {
		s := &Schema{Type: TypeString, Optional: true, Name: nameJSON, Version: 1}
		if _, err := a.encode(b.Context(), "outbox.event.order", false, s, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAvroRefusals: a URL that is not the registry's base stops the relay
// (every event would meet it); a schema Avro cannot name (an expanded
// payload's key with a hyphen, which Confluent's converter fails on too)
// is the event's error and is not sent to the registry.
func TestAvroRefusals(t *testing.T) {
	reg := testenv.StartRegistry(t, "", "")
	cfg := RegistryConfig{URLs: []string{reg.URL + "/not-the-registry"}}
	cfg.setDefaults()
	a, err := newAvroSerde(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.encode(t.Context(), "outbox.event.order", false, envelopeSchema, envelopeValue("{}"))
	var ne errNotEvent
	if !errors.As(err, &ne) || !connector.IsPermanent(err) || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "base URL") {
		t.Errorf("a wrong base URL: %v; want a permanent error, not the event's, pointing at schema_registry.url", err)
	}

	a = newTestSerde(t, reg, RegistryConfig{})
	bad := &Schema{Type: TypeStruct, Optional: true, Name: "payload", Fields: []Field{{Name: "my-key", Schema: optString}}}
	_, err = a.encode(t.Context(), "outbox.event.order", false, bad, &Struct{Schema: bad, Values: []any{"x"}})
	if err == nil || errors.As(err, &ne) || !strings.Contains(err.Error(), "not valid Avro") {
		t.Errorf("a field name Avro refuses: %v; want the event's error saying the schema is not valid Avro", err)
	}
	if n := reg.Requests("POST", "/subjects/"); n != 0 {
		t.Errorf("%d requests to register an invalid schema, want none", n)
	}
}
