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
	r.load = func(context.Context, string) (*tableMeta, error) {
		return &tableMeta{schema: "public", table: "outbox", columns: cols}, nil
	}
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
		m, err := r.Route(row())
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := header(m, "eventType"); !ok || (h.Value == nil) != (tc.want == nil) || string(h.Value) != string(tc.want) {
			t.Errorf("header format %s: eventType header %q (present %t, nil %t), want %q", tc.format, h.Value, ok, h.Value == nil, tc.want)
		}
	}
	r := fixedRouter(t, RouterConfig{AdditionalFields: []string{"type:envelope:eventType"}, ValueFormat: FormatJSON, HeaderFormat: FormatSimple}, outboxColumns()...)
	m, err := r.Route(row())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"payload":"{\"a\": 1}","eventType":null}`; string(m.Value) != want {
		t.Errorf("envelope %s, want %s", m.Value, want)
	}
}
