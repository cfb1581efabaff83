package debezium

import (
	"regexp"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// TestRouteNullKey: the key column NULL, the record's key is what each key
// converter writes of (the column's optional schema, null), as
// EventRouterDelegate.defineRecordKey hands it Struct.get of the column:
// null for StringConverter, ByteArrayConverter's delegate and outboxrelay's
// raw key; JsonConverter's NullNode ("null"), with schemas in its
// envelope. A column default stands in for the NULL (Struct.get).
func TestRouteNullKey(t *testing.T) {
	cols := outboxColumns(
		&column{name: "tenant", typName: "varchar"},
		&column{name: "region", typName: "varchar", defaultExpr: "'eu'::character varying"},
	)
	m := connector.ColumnMap{AggregateID: "tenant"}.WithDefaults()
	row := func() *connector.Event {
		e := m.NewEvent([]connector.Column{
			{Name: "id", Value: []byte("4d47e190-0402-4048-bc2c-89dd54343cdc")},
			{Name: "aggregatetype", Value: []byte("order")},
			{Name: "aggregateid", Value: []byte("1")},
			{Name: "payload", Value: []byte(`{}`)},
			{Name: "tenant", Null: true},
			{Name: "region", Null: true},
		}, time.Unix(0, 0), "test")
		if !e.AggregateIDNull || e.Invalid == nil {
			t.Fatalf("NewEvent: %+v", e)
		}
		return &e
	}
	for _, tc := range []struct {
		name     string
		cfg      RouterConfig
		key      string
		wantNull bool
	}{
		{name: "raw", wantNull: true},
		{name: "StringConverter", cfg: RouterConfig{KeyFormat: FormatString}, wantNull: true},
		{name: "BinaryDataConverter to StringConverter", cfg: RouterConfig{KeyFormat: FormatBytes, KeyDelegateFormat: FormatString}, wantNull: true},
		{name: "JsonConverter", cfg: RouterConfig{KeyFormat: FormatJSON}, key: "null"},
		{name: "JsonConverter with schemas", cfg: RouterConfig{KeyFormat: FormatJSONSchema}, key: `{"schema":{"type":"string","optional":true},"payload":null}`},
		{name: "column default", cfg: RouterConfig{KeyFormat: FormatJSON, Columns: connector.ColumnMap{AggregateID: "region"}}, key: `"eu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.Columns.AggregateID == "" {
				cfg.Columns = m
			}
			e := row()
			if cfg.Columns.AggregateID == "region" {
				e = func() *connector.Event {
					ev := cfg.Columns.WithDefaults().NewEvent([]connector.Column{
						{Name: "id", Value: []byte("4d47e190-0402-4048-bc2c-89dd54343cdc")},
						{Name: "aggregatetype", Value: []byte("order")},
						{Name: "payload", Value: []byte(`{}`)},
						{Name: "region", Null: true},
					}, time.Unix(0, 0), "test")
					return &ev
				}()
			}
			msg, err := fixedRouter(t, cfg, cols...).Route(t.Context(), e)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNull != (msg.Key == nil) || (!tc.wantNull && string(msg.Key) != tc.key) {
				t.Errorf("key %q (null %t), want %q (null %t)", msg.Key, msg.Key == nil, tc.key, tc.wantNull)
			}
		})
	}
}

// TestRouteContextHeaders: with extended.headers.enabled the four context
// headers come first, each a required string the header converter writes
// (DebeziumHeaderProducer.contextHeaders), the run id one for the
// router's life.
func TestRouteContextHeaders(t *testing.T) {
	r := fixedRouter(t, RouterConfig{ContextHeaders: true, SchemaTopicPrefix: "dbserver1", HeaderFormat: FormatJSONSchema}, outboxColumns()...)
	var runIDs []string
	for range 2 {
		msg, err := r.Route(t.Context(), outboxRow(connector.Column{Name: "payload", Value: []byte(`{}`)}))
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Headers) != 5 {
			t.Fatalf("headers %v, want 4 context headers and id", msg.Headers)
		}
		str := func(s string) string { return `{"schema":{"type":"string","optional":false},"payload":"` + s + `"}` }
		for i, want := range []connector.Header{
			{Key: "__debezium.context.connectorLogicalName", Value: []byte(str("dbserver1"))},
			{Key: "__debezium.context.taskId", Value: []byte(str("0"))},
			{Key: "__debezium.context.connectorName", Value: []byte(str("postgresql"))},
		} {
			if msg.Headers[i].Key != want.Key || string(msg.Headers[i].Value) != string(want.Value) {
				t.Errorf("header %d: %s=%s, want %s=%s", i, msg.Headers[i].Key, msg.Headers[i].Value, want.Key, want.Value)
			}
		}
		run := msg.Headers[3]
		if !regexp.MustCompile(`^\{"schema":\{"type":"string","optional":false\},"payload":"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"\}$`).Match(run.Value) || run.Key != "__debezium.context.runId" {
			t.Errorf("header 3: %s=%s, want the run id, a version 7 UUID", run.Key, run.Value)
		}
		runIDs = append(runIDs, string(run.Value))
	}
	if runIDs[0] != runIDs[1] {
		t.Errorf("run ids %v, want one for the router's life", runIDs)
	}
	if err := (RouterConfig{PostgresURL: "postgres://x", ContextHeaders: true}).Validate(); err == nil {
		t.Error("context headers without a topic prefix validate; want an error asking for schema_topic_prefix")
	}
}
