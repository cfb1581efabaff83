package debezium

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// fixedRouter is a Router whose outbox table has the given columns,
// without reading a catalog.
func fixedRouter(t *testing.T, cfg RouterConfig, cols ...*column) *Router {
	t.Helper()
	cfg.PostgresURL = "postgres://unused"
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.tables.catalog = catalogFunc(func(context.Context, string) (*tableMeta, error) {
		return &tableMeta{schema: "public", table: "outbox", columns: cols}, nil
	})
	return r
}

// outboxColumns are the documentation's outbox table with a nullable type
// column, then extra.
func outboxColumns(extra ...*column) []*column {
	return append([]*column{
		{name: "id", typName: "uuid", notNull: true},
		{name: "aggregatetype", typName: "varchar", notNull: true},
		{name: "aggregateid", typName: "varchar", notNull: true},
		{name: "type", typName: "varchar"},
		{name: "payload", typName: "jsonb"},
	}, extra...)
}

// outboxRow is an event of order 1 with the given type, payload and
// other columns, made as the sources make it.
func outboxRow(cols ...connector.Column) *connector.Event {
	row := append([]connector.Column{
		{Name: "id", Value: []byte("4d47e190-0402-4048-bc2c-89dd54343cdc")},
		{Name: "aggregatetype", Value: []byte("order")},
		{Name: "aggregateid", Value: []byte("1")},
	}, cols...)
	e := connector.ColumnMap{}.WithDefaults().NewEvent(row, time.Unix(0, 0), "test")
	return &e
}

func header(m connector.Message, key string) (connector.Header, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return h, true
		}
	}
	return connector.Header{}, false
}

// A NULL type column is null wherever Debezium puts it: EventRouterDelegate
// adds eventStruct.get(field), null, as a header (a null header with
// SimpleHeaderConverter, JsonConverter's null with JsonConverter) or an
// envelope field.
func TestNullTypeColumn(t *testing.T) {
	row := func() *connector.Event {
		return outboxRow(connector.Column{Name: "type", Null: true}, connector.Column{Name: "payload", Value: []byte(`{"a": 1}`)})
	}
	for _, tc := range []struct {
		format Format
		want   []byte
	}{{FormatRaw, nil}, {FormatSimple, nil}, {FormatJSON, []byte("null")}} {
		r := fixedRouter(t, RouterConfig{AdditionalFields: []string{"type:header:eventType"}, HeaderFormat: tc.format}, outboxColumns()...)
		m, err := r.Route(t.Context(), row())
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := header(m, "eventType"); !ok || (h.Value == nil) != (tc.want == nil) || string(h.Value) != string(tc.want) {
			t.Errorf("header format %s: eventType header %q (present %t, nil %t), want %q", tc.format, h.Value, ok, h.Value == nil, tc.want)
		}
	}
	r := fixedRouter(t, RouterConfig{AdditionalFields: []string{"type:envelope:eventType"}, ValueFormat: FormatJSON, HeaderFormat: FormatSimple}, outboxColumns()...)
	m, err := r.Route(t.Context(), row())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"payload":"{\"a\": 1}","eventType":null}`; string(m.Value) != want {
		t.Errorf("envelope %s, want %s", m.Value, want)
	}
}

// A NULL in a column with a DEFAULT is the default wherever the outbox
// router reads the column with Struct.get(field), which returns the
// schema's default for a null: headers, envelope fields and the payload,
// which is then no delete event (EventRouterDelegate: payload == null ||
// payload.toString().trim().isEmpty()). The partition is read with
// getInt32, which does not.
func TestNullColumnWithDefault(t *testing.T) {
	cols := outboxColumns(
		&column{name: "tenant", typName: "varchar", defaultExpr: "'acme'::character varying"},
		&column{name: "shard", typName: "int4", defaultExpr: "3"},
	)
	cols[4] = &column{name: "payload", typName: "jsonb", defaultExpr: "'{}'::jsonb"}
	row := func() *connector.Event {
		return outboxRow(
			connector.Column{Name: "type", Value: []byte("OrderCreated")},
			connector.Column{Name: "payload", Null: true},
			connector.Column{Name: "tenant", Null: true},
			connector.Column{Name: "shard", Null: true},
		)
	}
	for _, tc := range []struct {
		name   string
		cfg    RouterConfig
		value  string
		tenant string
	}{
		{name: "string", cfg: RouterConfig{ValueFormat: FormatString, HeaderFormat: FormatSimple}, value: "{}", tenant: "acme"},
		{name: "tombstone on empty payload", cfg: RouterConfig{ValueFormat: FormatString, HeaderFormat: FormatSimple, TombstoneOnEmptyPayload: true}, value: "{}", tenant: "acme"},
		{name: "json", cfg: RouterConfig{ValueFormat: FormatJSON, HeaderFormat: FormatJSON}, value: `"{}"`, tenant: `"acme"`},
		{name: "expanded", cfg: RouterConfig{ValueFormat: FormatJSON, HeaderFormat: FormatSimple, ExpandJSONPayload: true}, value: `{}`, tenant: "acme"},
		{name: "envelope", cfg: RouterConfig{ValueFormat: FormatString, HeaderFormat: FormatSimple, AdditionalFields: []string{"tenant:envelope"}},
			value: "Struct{payload={},tenant=acme}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.AdditionalFields = append(tc.cfg.AdditionalFields, "tenant:header", "shard:partition")
			m, err := fixedRouter(t, tc.cfg, cols...).Route(t.Context(), row())
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Value) != tc.value || m.Value == nil {
				t.Errorf("value %q (nil %t), want %q", m.Value, m.Value == nil, tc.value)
			}
			if h, _ := header(m, "tenant"); tc.tenant != "" && string(h.Value) != tc.tenant {
				t.Errorf("header tenant %q (nil %t), want %q", h.Value, h.Value == nil, tc.tenant)
			}
			if m.Partition != nil {
				t.Errorf("partition %d, want none: getInt32 gives the NULL, not the default", *m.Partition)
			}
		})
	}
	// Without a default a NULL payload is still null, and a tombstone.
	cols[4] = &column{name: "payload", typName: "jsonb"}
	m, err := fixedRouter(t, RouterConfig{ValueFormat: FormatString, HeaderFormat: FormatSimple, TombstoneOnEmptyPayload: true}, cols...).Route(t.Context(), row())
	if err != nil || m.Value != nil {
		t.Errorf("NULL payload without a default: value %q (%v), want a tombstone", m.Value, err)
	}
}
