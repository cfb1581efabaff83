package debezium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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

// route builds the record; any error is about this row.
func (r *Router) route(ctx context.Context, t *tableMeta, e *connector.Event) (connector.Message, error) {
	cfg := &r.cfg
	m := connector.Message{EventID: e.ID, Timestamp: e.CommitTime}

	topic, err := r.topic(e.AggregateType)
	if err != nil {
		return m, err
	}
	m.Topic = topic

	// Headers, in the order Kafka Connect sees them: the connector's
	// context headers, the tracing span the router activates, then id,
	// then the additional fields.
	for _, h := range r.context {
		v, err := r.stringHeader(string(h.Value))
		if err != nil {
			return m, err
		}
		m.Headers = append(m.Headers, connector.Header{Key: h.Key, Value: v})
	}
	if cfg.TracingColumn != "" {
		if raw, null, ok := e.Field(cfg.Columns, cfg.TracingColumn); ok && !null {
			hs, err := spanContext(raw)
			if err != nil {
				r.warn("span", "tracing headers left out", "event_id", e.ID, "origin", e.Origin, "err", err)
			}
			for _, h := range hs {
				v, err := r.stringHeader(h.value)
				if err != nil {
					return m, err
				}
				m.Headers = append(m.Headers, connector.Header{Key: h.key, Value: v})
			}
		}
	}
	id, err := r.header(t, e, cfg.Columns.ID)
	if err != nil {
		return m, err
	}
	m.Headers = append(m.Headers, connector.Header{Key: "id", Value: id})

	var envelope []AdditionalField
	for _, f := range r.c.fields {
		_, _, present := e.Field(cfg.Columns, f.Column)
		if !present && f.Placement != PlaceEnvelope {
			if cfg.AdditionalFieldsOptional {
				continue
			}
			return m, fmt.Errorf("the row has no column %q for %s %q (routing.additional_fields_required; Debezium's table.field.additional.missing)", f.Column, f.Placement, f.Alias)
		}
		switch f.Placement {
		case PlaceHeader:
			v, err := r.header(t, e, f.Column)
			if err != nil {
				return m, err
			}
			m.Headers = append(m.Headers, connector.Header{Key: f.Alias, Value: v})
		case PlacePartition:
			raw, null, _ := e.Field(cfg.Columns, f.Column)
			if null {
				continue
			}
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n < 0 || n > math.MaxInt32 {
				return m, fmt.Errorf("partition column %q holds %q, which is not a partition number", f.Column, raw)
			}
			p := int32(n)
			m.Partition = &p
		case PlaceEnvelope:
			envelope = append(envelope, f)
		}
	}

	if m.Key, err = r.key(ctx, t, e, topic); err != nil {
		return m, err
	}
	if m.Value, err = r.value(ctx, t, e, topic, envelope); err != nil {
		return m, err
	}

	if cfg.TimestampColumn != "" {
		raw, null, ok := e.Field(cfg.Columns, cfg.TimestampColumn)
		if !ok {
			return m, fmt.Errorf("the row has no timestamp column %q", cfg.TimestampColumn)
		}
		if !null {
			ms, err := t.column(cfg.TimestampColumn).timestampMillis(raw)
			if err != nil {
				return m, err
			}
			m.Timestamp = time.UnixMilli(ms)
		}
	}
	return m, nil
}

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

func (r *Router) header(t *tableMeta, e *connector.Event, name string) ([]byte, error) {
	if r.cfg.HeaderFormat == FormatRaw {
		raw, null, _ := e.Field(r.cfg.Columns, name)
		if null {
			return nil, nil
		}
		return raw, nil
	}
	s, v, err := r.typed(t, e, name)
	if err != nil {
		return nil, err
	}
	b, err := convertHeader(r.cfg.HeaderFormat, s, v)
	if err != nil {
		return nil, fmt.Errorf("header from column %q: %w", name, err)
	}
	return b, nil
}

// stringHeader converts a header that Kafka Connect holds as a required
// string (the tracing headers).
func (r *Router) stringHeader(v string) ([]byte, error) {
	switch r.cfg.HeaderFormat {
	case FormatRaw, FormatSimple:
		return []byte(v), nil
	}
	return convertHeader(r.cfg.HeaderFormat, &Schema{Type: TypeString}, v)
}

func (r *Router) key(ctx context.Context, t *tableMeta, e *connector.Event, topic string) ([]byte, error) {
	if r.cfg.KeyFormat == FormatRaw {
		if e.AggregateIDNull {
			return nil, nil
		}
		return []byte(e.AggregateID), nil
	}
	s, v, err := r.typed(t, e, r.cfg.Columns.AggregateID)
	if err != nil {
		return nil, err
	}
	b, err := r.convert(ctx, topic, true, r.cfg.KeyFormat, r.cfg.KeyDelegateFormat, s, v)
	if err != nil {
		return nil, fmt.Errorf("key from column %q: %w", r.cfg.Columns.AggregateID, err)
	}
	return b, nil
}

func (r *Router) value(ctx context.Context, t *tableMeta, e *connector.Event, topic string, envelope []AdditionalField) ([]byte, error) {
	cfg := &r.cfg
	blank := e.Payload == nil
	if r.cfg.ValueFormat == FormatRaw {
		if !blank && cfg.TombstoneOnEmptyPayload {
			c := t.column(cfg.Columns.Payload)
			blank = c != nil && c.typName != "bytea" && isBlank(e.Payload)
		}
		if blank && cfg.TombstoneOnEmptyPayload {
			return nil, nil
		}
		return e.Payload, nil
	}
	var schema *Schema
	var payload any
	var err error
	if e.Message != nil {
		schema, payload, err = r.messagePayload(e)
	} else {
		schema, payload, err = r.typed(t, e, cfg.Columns.Payload)
	}
	if err != nil {
		return nil, err
	}
	// Debezium's delete check, payload == null ||
	// payload.toString().trim().isEmpty(), on the payload Struct.get gave:
	// a NULL with a column default is not blank; bytes never are.
	blank = payload == nil
	if text, ok := payload.(string); ok {
		blank = isBlank([]byte(text))
		if cfg.ExpandJSONPayload {
			s, v, err := r.exp.expand(cfg.Columns.Payload, text)
			switch {
			case err == nil:
				schema, payload = s, v
			case errors.Is(err, errNotExpandable):
				r.warn("expand", "payload is not a JSON object; sent as a string, as Debezium does", "event_id", e.ID, "origin", e.Origin)
			case errors.Is(err, errTopLevelArray) && len(envelope) == 0 && cfg.ValueFormat == FormatString:
				// StringConverter writes the text whatever schema Debezium
				// inferred for it.
			default:
				return nil, err
			}
		}
	} else if payload != nil && cfg.ExpandJSONPayload && e.Message == nil {
		r.warn("expand", "payload is not text; sent as it is, as Debezium does", "event_id", e.ID, "origin", e.Origin)
	}
	if blank && cfg.TombstoneOnEmptyPayload {
		return nil, nil
	}
	if len(envelope) > 0 {
		schema, payload, err = r.envelope(t, e, schema, payload, envelope)
		if err != nil {
			return nil, err
		}
	}
	b, err := r.convert(ctx, topic, false, cfg.ValueFormat, cfg.ValueDelegateFormat, schema, payload)
	if err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	return b, nil
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
