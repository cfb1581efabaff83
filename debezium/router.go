package debezium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Router is a [connector.Router] that writes records as Debezium's
// PostgreSQL connector with the Outbox Event Router and Kafka Connect's
// converters would. It types the columns by the outbox tables' catalogs,
// which it gets from a [Catalog] beneath it: on first use, and again when
// a row's columns differ from what it has.
//
// Route is called from one goroutine, as the runner does; Router is not
// safe for concurrent use. It keeps no context: what Route waits for (the
// Schema Registry, a catalog read) is bounded by the context of the call.
type Router struct {
	cfg RouterConfig
	c   *compiled
	exp expander
	log *slog.Logger
	// base is the logger given, without the router's component.
	base *slog.Logger
	// tables are the outbox tables' catalogs as last read.
	tables tables

	lastWarn map[string]time.Time
	// registry writes the key or value of a Schema Registry format (avro,
	// json_sr, protobuf); nil without one.
	registry *registrySerde
	// context are the __debezium.context.* headers' values as text; nil
	// without ContextHeaders.
	context []connector.Header
}

var _ connector.Router = (*Router)(nil)

// RouterOption wires a router to its surroundings.
type RouterOption func(*Router)

// WithLogger sets the logger for warnings about records (a payload that
// could not be expanded, a bad span context).
func WithLogger(l *slog.Logger) RouterOption {
	return func(r *Router) { r.base, r.log = l, l.With("component", "debezium") }
}

// WithCatalog sets where the router reads the outbox tables' column types
// and defaults. Default: [PostgresCatalog] of cfg.PostgresURL and
// cfg.Network.
func WithCatalog(c Catalog) RouterOption {
	return func(r *Router) { r.tables.catalog = c }
}

// WithRegistryState is called after every request to the Schema Registry
// with nil when it answered and with the error when it did not, for a
// readiness probe and a metric. It is called from the routing goroutine
// and must not block.
func WithRegistryState(f func(error)) RouterOption {
	return func(r *Router) {
		if r.registry != nil {
			r.registry.state = f
		}
	}
}

// NewRouter returns a router for cfg, or every problem with cfg. It reads
// the outbox tables' catalogs (see [WithCatalog]) at [Router.Check] and
// when a row has a column the catalog it read lacks.
func NewRouter(cfg RouterConfig, opts ...RouterOption) (*Router, error) {
	cfg.setDefaults()
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, c: c, exp: expander{nullsAsBytes: cfg.JSONNullFields == "optional_bytes"},
		log: slog.New(slog.DiscardHandler), base: slog.New(slog.DiscardHandler), lastWarn: map[string]time.Time{}}
	r.tables = tables{
		catalog: PostgresCatalog(cfg.PostgresURL, cfg.Network),
		names:   c.tables,
		fits:    r.check,
		read:    map[string]*readTable{},
		modes:   valueModes{time: cfg.TimePrecision, decimal: cfg.DecimalHandling, interval: cfg.IntervalHandling},
	}
	if cfg.UsesRegistry() {
		if r.registry, err = newRegistrySerde(cfg.Registry, registryFormat(cfg.KeyFormat), registryFormat(cfg.ValueFormat)); err != nil {
			return nil, err
		}
	}
	if cfg.ContextHeaders {
		// One run id for the relay's life, as Debezium's is one for its
		// task's.
		r.context = contextHeaders(cfg.SchemaTopicPrefix, newRunID(time.Now()))
	}
	for _, o := range opts {
		o(r)
	}
	if r.registry != nil {
		r.registry.log = r.base.With("component", "schema_registry")
	}
	return r, nil
}

// Route implements [connector.Router]. A problem with one row is an
// [*connector.EventError]; a table that does not fit the configuration is
// permanent; a failure to read the catalog is neither, so the runner
// retries. ctx bounds the catalog read and the Schema Registry's answer:
// when it ends, Route returns an error that is not the row's.
func (r *Router) Route(ctx context.Context, e *connector.Event) (connector.Message, error) {
	var t *tableMeta
	if e.Message != nil {
		t = messageTable(r.cfg.Columns, e) // messages.go
	} else {
		var err error
		if t, err = r.tables.of(ctx, e); err != nil {
			return connector.Message{}, err
		}
	}
	m, err := r.route(ctx, t, e)
	var notEvent errNotEvent
	if errors.As(err, &notEvent) {
		// Not this row's fault: the relay stopping while the registry
		// did not answer, or a registry that refuses the relay.
		return connector.Message{}, notEvent.error
	}
	if err != nil {
		// The topic, when known, goes with the error, so that a dead
		// letter says where the event was headed.
		return connector.Message{Topic: m.Topic, EventID: e.ID}, &connector.EventError{EventID: e.ID, Origin: e.Origin, Err: err}
	}
	return m, nil
}

// Check reads the outbox tables' catalogs and reports what the first
// event would: a permanent error (wrapped by [connector.Permanent]) when a
// table lacks a column the configuration needs or has one the configured
// formats cannot write; any other error when a catalog could not be read
// within 30 seconds, which the first event tries again. The relay calls it
// at start so that a table that can never work stops it then, not at the
// first event. Routing goes on with the catalogs it read, reading a table's
// again when a row has a column it does not know.
func (r *Router) Check(ctx context.Context) error { return r.tables.check(ctx) }

func (r *Router) topic(value string) (string, error) {
	var topic string
	switch {
	case r.c.topics != nil:
		topic = r.c.topics.route(value)
	case r.cfg.Topic != "":
		return r.cfg.Topic, nil
	default:
		topic = r.cfg.TopicPrefix + value
	}
	if err := connector.ValidTopic(topic); err != nil {
		return "", fmt.Errorf("aggregate type %q: %w", value, err)
	}
	return topic, nil
}

// typed returns the named column's schema and Connect value: for a NULL,
// the schema's default where it has one, as the outbox router reads the
// columns it writes with Kafka's Struct.get(field), which returns the
// default for a null. (Routing, partition, timestamp and schema version
// are read with getString, getInt32, getInt64, which do not.)
func (r *Router) typed(t *tableMeta, e *connector.Event, name string) (*Schema, any, error) {
	raw, null, ok := e.Field(r.cfg.Columns, name)
	if !ok {
		return nil, nil, fmt.Errorf("the row has no column %q", name)
	}
	c := t.column(name)
	if c == nil {
		return nil, nil, fmt.Errorf("column %q is not in the table's catalog", name)
	}
	s, err := c.schema()
	if err != nil {
		return nil, nil, err
	}
	if null && s.Default != nil {
		return s, s.Default, nil
	}
	v, err := c.value(raw, null)
	if err != nil {
		return nil, nil, err
	}
	return s, v, nil
}

// convert writes a key or value of topic in format f, through the
// delegate format for what bytes cannot write.
func (r *Router) convert(ctx context.Context, topic string, isKey bool, f, delegate Format, s *Schema, v any) ([]byte, error) {
	if registryFormat(f) != nil {
		return r.registry.encode(ctx, topic, isKey, s, v)
	}
	if f == FormatBytes {
		return passThrough(delegate, s, v)
	}
	return convert(f, s, v)
}

// envelope builds the struct value of the envelope placement: payload
// first, then the envelope fields in configuration order, named
// <topic.prefix>.<schema>.<table>.<route-by value>.Value.
func (r *Router) envelope(t *tableMeta, e *connector.Event, payloadSchema *Schema, payload any, fields []AdditionalField) (*Schema, any, error) {
	name := t.schema + "." + t.table + "." + e.AggregateType + ".Value"
	if r.cfg.SchemaTopicPrefix != "" {
		name = r.cfg.SchemaTopicPrefix + "." + name
	}
	s := &Schema{Type: TypeStruct, Name: name, Fields: []Field{{Name: "payload", Schema: payloadSchema}}}
	values := []any{payload}
	for _, f := range fields {
		fs, v, err := r.typed(t, e, f.Column)
		if err != nil {
			return nil, nil, err
		}
		if s.field(f.Alias) >= 0 {
			return nil, nil, fmt.Errorf("envelope field %q is placed twice", f.Alias)
		}
		s.Fields = append(s.Fields, Field{Name: f.Alias, Schema: fs})
		values = append(values, v)
	}
	if r.cfg.SchemaVersionColumn != "" {
		raw, null, ok := e.Field(r.cfg.Columns, r.cfg.SchemaVersionColumn)
		if ok && !null {
			n, err := strconv.ParseInt(string(raw), 10, 32)
			if err != nil || n <= 0 {
				return nil, nil, fmt.Errorf("schema version column %q holds %q, not a positive version", r.cfg.SchemaVersionColumn, raw)
			}
			s.Version = int(n)
		}
	}
	st := &Struct{Schema: s, Values: values}
	for i, f := range s.Fields {
		if err := f.Schema.validate(values[i]); err != nil {
			return nil, nil, fmt.Errorf("envelope field %q: %w", f.Name, err)
		}
	}
	return s, st, nil
}

// warn logs a record-level warning at most once a minute per kind.
func (r *Router) warn(kind, msg string, args ...any) {
	if time.Since(r.lastWarn[kind]) < time.Minute {
		return
	}
	r.lastWarn[kind] = time.Now()
	r.log.Warn(msg, args...)
}
