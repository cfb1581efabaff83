package debezium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/pgsql"
)

// RouterConfig says how the [Router] turns an event into a record. Its
// zero value (with a URL and table) makes the records of
// [connector.Routing]; each field adds one of the Outbox Event Router's
// options.
type RouterConfig struct {
	// PostgresURL and Table (schema.table) locate the outbox table, whose
	// catalog types the columns as Debezium's connector does. Required.
	PostgresURL string
	Table       string
	// Tables, instead of Table, are several outbox tables; an event is
	// typed by its own table's catalog (connector.Event.Table).
	Tables []string
	// Columns names the outbox columns (table.field.event.id, .key,
	// .payload, route.by.field). Default Debezium's names.
	Columns connector.ColumnMap
	// Network bounds the connection that reads the outbox tables'
	// catalogs, as the sources' (postgres.connect_timeout, keepalive,
	// tcp_user_timeout, query_timeout): a PostgreSQL that does not answer
	// fails the read within them. Zero fields take pgsql's defaults.
	Network pgsql.Network

	// TopicPrefix and Topic are outboxrelay's own topic routing
	// (routing.topic_prefix, routing.topic), used when TopicRegex and
	// TopicReplacement are empty. Default prefix "outbox.event.".
	TopicPrefix string
	Topic       string
	// TopicRegex and TopicReplacement are route.topic.regex (a Java regex
	// matched against the whole route-by value) and
	// route.topic.replacement (Java replacement syntax). Defaults
	// DefaultTopicRegex and DefaultTopicReplacement.
	TopicRegex       string
	TopicReplacement string
	// TypeHeader, when set, adds the event type as a header of this name
	// after the others (routing.type_header).
	TypeHeader string

	// AdditionalFields is table.fields.additional.placement, one
	// "column:placement[:alias]" an entry, placement header, envelope or
	// partition.
	AdditionalFields []string
	// AdditionalFieldsOptional is table.field.additional.missing=ignore
	// (table.fields.additional.error.on.missing=false before Debezium
	// 3.6): a header or partition column missing from a row is left out
	// instead of failing the event. Default false (required).
	AdditionalFieldsOptional bool
	// ExpandJSONPayload is table.expand.json.payload: a JSON text payload
	// becomes a struct (needs ValueFormat json, json+schema or string).
	ExpandJSONPayload bool
	// JSONNullFields is table.json.payload.null.behavior: "ignore"
	// (default) drops null fields of an expanded payload, "optional_bytes"
	// keeps them as optional bytes.
	JSONNullFields string
	// TimestampColumn is table.field.event.timestamp: the record timestamp
	// comes from this column (timestamp, timestamptz, or bigint epoch
	// milliseconds) instead of the commit time.
	TimestampColumn string
	// TombstoneOnEmptyPayload is route.tombstone.on.empty.payload: a NULL
	// or blank payload makes a record with a null value.
	TombstoneOnEmptyPayload bool
	// TracingColumn is tracing.span.context.field: when the row has this
	// column and it is not NULL, its W3C traceparent (and tracestate) go
	// out as headers first. Empty: no tracing headers.
	TracingColumn string
	// SchemaVersionColumn is table.field.event.schema.version: an integer
	// column whose value is the version of the value struct schema.
	SchemaVersionColumn string
	// SchemaTopicPrefix is the connector's topic.prefix
	// (database.server.name), which names the value struct schema:
	// <prefix>.<schema>.<table>.<route-by value>.Value.
	SchemaTopicPrefix string

	// KeyFormat, ValueFormat and HeaderFormat say how the key, value and
	// headers are written. Default FormatRaw for each.
	KeyFormat    Format
	ValueFormat  Format
	HeaderFormat Format
	// KeyDelegateFormat and ValueDelegateFormat, with KeyFormat or
	// ValueFormat FormatBytes, write a key or value that is not bytes (a
	// column that is not bytea, an envelope, an expanded payload) in one of
	// DelegateFormats, as Debezium's BinaryDataConverter does with
	// delegate.converter.type. Default none: such a key or value is an
	// error.
	KeyDelegateFormat   Format
	ValueDelegateFormat Format
	// Registry is the Schema Registry of KeyFormat or ValueFormat
	// FormatAvro; required with either.
	Registry RegistryConfig
}

// Placement is where an additional field goes.
type Placement string

const (
	PlaceHeader    Placement = "header"
	PlaceEnvelope  Placement = "envelope"
	PlacePartition Placement = "partition"
)

// AdditionalField is one entry of table.fields.additional.placement.
type AdditionalField struct {
	Column    string
	Placement Placement
	// Alias is the header or field name; the column's name by default.
	Alias string
}

// ParseAdditionalField reads "column:placement[:alias]", each part trimmed
// of spaces as EventRouterConfigDefinition.parseAdditionalFieldsConfig
// trims them.
func ParseAdditionalField(s string) (AdditionalField, error) {
	parts := strings.Split(s, ":")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return AdditionalField{}, fmt.Errorf("additional field %q is not column:placement or column:placement:alias", s)
	}
	f := AdditionalField{Column: parts[0], Placement: Placement(strings.ToLower(parts[1])), Alias: parts[0]}
	switch f.Placement {
	case PlaceHeader, PlaceEnvelope, PlacePartition:
	default:
		return AdditionalField{}, fmt.Errorf("additional field %q: placement %q is not header, envelope or partition", s, parts[1])
	}
	if len(parts) == 3 {
		if parts[2] == "" {
			return AdditionalField{}, fmt.Errorf("additional field %q has an empty alias", s)
		}
		f.Alias = parts[2]
	}
	return f, nil
}

func (c *RouterConfig) setDefaults() {
	c.Columns = c.Columns.WithDefaults()
	c.Network.SetDefaults()
	if c.Table == "" {
		c.Table = "public.outbox"
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = "outbox.event."
	}
	for _, f := range []*Format{&c.KeyFormat, &c.ValueFormat, &c.HeaderFormat} {
		if *f == "" {
			*f = FormatRaw
		}
	}
	if c.JSONNullFields == "" {
		c.JSONNullFields = "ignore"
	}
	if c.Avro() {
		c.Registry.setDefaults()
	}
}

// Avro reports whether the key or the value is written as Avro, which
// needs the Schema Registry.
func (c *RouterConfig) Avro() bool { return c.KeyFormat == FormatAvro || c.ValueFormat == FormatAvro }

// Validate reports every problem with c at once; it does not read the
// table.
func (c RouterConfig) Validate() error {
	c.setDefaults()
	_, err := c.compile()
	return err
}

// compiled is a validated configuration.
type compiled struct {
	topics   *topicRouter
	fields   []AdditionalField
	envelope bool
	// tables are the outbox tables, schema.table; the first is the one
	// of an event that does not name its table.
	tables []string
}

func (c *RouterConfig) compile() (*compiled, error) {
	var errs []error
	out := &compiled{}
	if c.PostgresURL == "" {
		errs = append(errs, errors.New("the Debezium router needs postgres.url to read the outbox table's column types"))
	}
	names := c.Tables
	if len(names) == 0 {
		names = []string{c.Table}
	}
	for _, name := range names {
		schema, table, err := pgsql.SplitTable(name)
		if err != nil {
			errs = append(errs, err)
		}
		out.tables = append(out.tables, schema+"."+table)
	}
	if err := c.Columns.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Network.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.TopicRegex != "" || c.TopicReplacement != "" {
		if c.Topic != "" {
			errs = append(errs, errors.New("routing.topic and routing.topic_regex/topic_replacement both say where events go; set one"))
		}
		regex, repl := c.TopicRegex, c.TopicReplacement
		if regex == "" {
			regex = DefaultTopicRegex
		}
		if repl == "" {
			repl = DefaultTopicReplacement
		}
		tr, err := newTopicRouter(regex, repl)
		if err != nil {
			errs = append(errs, err)
		}
		out.topics = tr
	} else if c.Topic != "" {
		if err := connector.ValidTopic(c.Topic); err != nil {
			errs = append(errs, fmt.Errorf("routing.topic: %w", err))
		}
	}
	for _, s := range c.AdditionalFields {
		f, err := ParseAdditionalField(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.fields = append(out.fields, f)
		if f.Placement == PlaceEnvelope {
			if f.Alias == "payload" {
				errs = append(errs, fmt.Errorf("additional field %q: the envelope already has a payload field", s))
			}
			out.envelope = true
		}
	}
	if c.TypeHeader != "" {
		out.fields = append(out.fields, AdditionalField{Column: c.Columns.Type, Placement: PlaceHeader, Alias: c.TypeHeader})
	}
	if !slices.Contains(ValueFormats, c.KeyFormat) {
		errs = append(errs, fmt.Errorf("routing.key_format: %q is not one of %s", c.KeyFormat, joinFormats(ValueFormats)))
	}
	if !slices.Contains(ValueFormats, c.ValueFormat) {
		errs = append(errs, fmt.Errorf("routing.value_format: %q is not one of %s", c.ValueFormat, joinFormats(ValueFormats)))
	}
	if !slices.Contains(HeaderFormats, c.HeaderFormat) {
		errs = append(errs, fmt.Errorf("routing.header_format: %q is not one of %s", c.HeaderFormat, joinFormats(HeaderFormats)))
	}
	for _, d := range []struct {
		what             string
		format, delegate Format
	}{{"key", c.KeyFormat, c.KeyDelegateFormat}, {"value", c.ValueFormat, c.ValueDelegateFormat}} {
		switch {
		case d.delegate == "":
		case !slices.Contains(DelegateFormats, d.delegate):
			errs = append(errs, fmt.Errorf("routing.%s_delegate_format: %q is not one of %s", d.what, d.delegate, joinFormats(DelegateFormats)))
		case d.format != FormatBytes:
			errs = append(errs, fmt.Errorf("routing.%s_delegate_format %q writes what %s_format bytes cannot; it has no use with %s_format %q", d.what, d.delegate, d.what, d.what, d.format))
		}
	}
	// A struct is not bytes: with value_format bytes the delegate writes it.
	structured := c.ValueFormat.structured() || (c.ValueFormat == FormatBytes && c.ValueDelegateFormat.structured())
	if out.envelope && !structured {
		errs = append(errs, fmt.Errorf("envelope fields make the value a struct, which value_format %q cannot write; use json, json+schema, string or avro, or bytes with a value_delegate_format", c.ValueFormat))
	}
	if c.ExpandJSONPayload && !structured {
		errs = append(errs, fmt.Errorf("expand_json_payload makes the payload a struct, which value_format %q cannot write; use json, json+schema, string or avro, or bytes with a value_delegate_format", c.ValueFormat))
	}
	if c.Avro() {
		errs = append(errs, c.Registry.validate()...)
		if st := c.Registry.SubjectNameStrategy; st == SubjectRecord || st == SubjectTopicRecord {
			// Confluent's RecordNameStrategy fails on any schema that is not
			// a record; only the envelope makes one.
			if c.KeyFormat == FormatAvro {
				errs = append(errs, fmt.Errorf("schema_registry.subject_name_strategy %s names subjects after Avro records, and the key is a column, never a record; use topic", st))
			}
			if c.ValueFormat == FormatAvro && !out.envelope {
				errs = append(errs, fmt.Errorf("schema_registry.subject_name_strategy %s names subjects after Avro records, and without envelope fields the value is no record; use topic, or place fields in the envelope", st))
			}
		}
	}
	switch c.JSONNullFields {
	case "ignore", "optional_bytes":
	default:
		errs = append(errs, fmt.Errorf("routing.json_null_fields: %q is not ignore or optional_bytes", c.JSONNullFields))
	}
	return out, errors.Join(errs...)
}

func joinFormats(fs []Format) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// Router is a [connector.Router] that writes records as Debezium's
// PostgreSQL connector with the Outbox Event Router and Kafka Connect's
// converters would. It reads the outbox table's catalog on first use, and
// again when a row's columns differ from what it read.
//
// Route is called from one goroutine, as the runner does; Router is not
// safe for concurrent use.
type Router struct {
	cfg RouterConfig
	c   *compiled
	exp expander
	log *slog.Logger
	// base is the logger given, without the router's component.
	base *slog.Logger
	// load reads the catalog of an outbox table, schema.table.
	load func(ctx context.Context, table string) (*tableMeta, error)

	metas    map[string]*loadedTable // by schema.table
	lastWarn map[string]time.Time
	// avro writes the key or value of format avro; nil without one.
	avro *avroSerde
}

var _ connector.Router = (*Router)(nil)

// loadedTable is an outbox table's catalog and when it was read.
type loadedTable struct {
	meta *tableMeta
	at   time.Time
}

// RouterOption wires a router to its surroundings.
type RouterOption func(*Router)

// WithLogger sets the logger for warnings about records (a payload that
// could not be expanded, a bad span context).
func WithLogger(l *slog.Logger) RouterOption {
	return func(r *Router) { r.base, r.log = l, l.With("component", "debezium") }
}

// WithContext bounds what routing waits for: a Schema Registry that does
// not answer is asked again until it does or ctx ends. Default: no bound.
func WithContext(ctx context.Context) RouterOption {
	return func(r *Router) {
		if r.avro != nil {
			r.avro.ctx = ctx
		}
	}
}

// WithRegistryState is called after every request to the Schema Registry
// with nil when it answered and with the error when it did not, for a
// readiness probe and a metric. It is called from the routing goroutine
// and must not block.
func WithRegistryState(f func(error)) RouterOption {
	return func(r *Router) {
		if r.avro != nil {
			r.avro.state = f
		}
	}
}

// NewRouter returns a router for cfg, or every problem with cfg.
func NewRouter(cfg RouterConfig, opts ...RouterOption) (*Router, error) {
	cfg.setDefaults()
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, c: c, exp: expander{nullsAsBytes: cfg.JSONNullFields == "optional_bytes"},
		log: slog.New(slog.DiscardHandler), base: slog.New(slog.DiscardHandler), lastWarn: map[string]time.Time{}, metas: map[string]*loadedTable{}}
	r.load = func(ctx context.Context, table string) (*tableMeta, error) {
		schema, name, _ := strings.Cut(table, ".")
		return loadTable(ctx, cfg.PostgresURL, cfg.Network, schema, name)
	}
	if cfg.Avro() {
		if r.avro, err = newAvroSerde(cfg.Registry); err != nil {
			return nil, err
		}
	}
	for _, o := range opts {
		o(r)
	}
	if r.avro != nil {
		r.avro.log = r.base.With("component", "schema_registry")
	}
	return r, nil
}

// Route implements [connector.Router]. A problem with one row is an
// [*connector.EventError]; a table that does not fit the configuration is
// permanent; a failure to read the catalog is neither, so the runner
// retries.
func (r *Router) Route(e *connector.Event) (connector.Message, error) {
	t, err := r.table(e)
	if err != nil {
		return connector.Message{}, err
	}
	m, err := r.route(t, e)
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
func (r *Router) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	for _, name := range r.c.tables {
		t, err := r.load(ctx, name)
		if err != nil {
			return err
		}
		if err := r.check(t); err != nil {
			errs = append(errs, err)
			continue
		}
		r.metas[name] = &loadedTable{meta: t, at: time.Now()}
	}
	if err := errors.Join(errs...); err != nil {
		return connector.Permanent(err)
	}
	return nil
}

// table returns the catalog entry of the event's table, reading it again
// when the row has a column it does not know (the table was altered), at
// most once a second.
func (r *Router) table(e *connector.Event) (*tableMeta, error) {
	name := e.Table
	if name == "" {
		name = r.c.tables[0]
	}
	lt := r.metas[name]
	stale := lt == nil
	if !stale {
		for _, c := range e.Extra {
			if lt.meta.column(c.Name) == nil {
				stale = true
				break
			}
		}
	}
	if !stale || (lt != nil && time.Since(lt.at) < time.Second) {
		return lt.meta, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := r.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := r.check(t); err != nil {
		return nil, connector.Permanent(err)
	}
	r.metas[name] = &loadedTable{meta: t, at: time.Now()}
	return t, nil
}

// check reports, at once, every column the configuration needs that the
// table lacks or whose type cannot be written in the configured format.
func (r *Router) check(t *tableMeta) error {
	var errs []error
	need := func(name, what string, typed bool) {
		c := t.column(name)
		if c == nil {
			errs = append(errs, fmt.Errorf("outbox table %s.%s has no column %q (%s)", t.schema, t.table, name, what))
			return
		}
		if typed {
			if _, err := c.schema(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
			}
		}
	}
	cfg := r.cfg
	need(cfg.Columns.ID, "the event id", cfg.HeaderFormat != FormatRaw)
	need(cfg.Columns.AggregateID, "the record key", cfg.KeyFormat != FormatRaw)
	need(cfg.Columns.Payload, "the payload", cfg.ValueFormat != FormatRaw)
	need(cfg.Columns.AggregateType, "the topic", false)
	// Debezium gives a bytes key or payload column the BYTES schema, which
	// is all ByteArrayConverter accepts ("Invalid schema type for
	// ByteArrayConverter"), and all BinaryDataConverter writes itself
	// without a delegate.converter.type (fromConnectData, in
	// assertDelegateProvided). Kafka Connect fails on the first record; the
	// column's type says so before any.
	bytesOnly := func(name, what string, delegate Format) {
		c := t.column(name)
		if c == nil || c.typName == "bytea" || delegate != "" {
			return
		}
		errs = append(errs, fmt.Errorf("%s column %q has type %s, and routing.%s_format bytes (ByteArrayConverter, or Debezium's BinaryDataConverter/ByteBufferConverter without a delegate) writes only bytea columns: "+
			"make the column bytea, set routing.%s_delegate_format (with BinaryDataConverter, %s.converter.delegate.converter.type) to write it as string, json or json+schema, or choose another %s_format",
			what, name, c.typName, what, what, what, what))
	}
	if cfg.KeyFormat == FormatBytes {
		bytesOnly(cfg.Columns.AggregateID, "key", cfg.KeyDelegateFormat)
	}
	if cfg.ValueFormat == FormatBytes && !r.c.envelope {
		bytesOnly(cfg.Columns.Payload, "value", cfg.ValueDelegateFormat)
	}
	for _, f := range r.c.fields {
		switch f.Placement {
		case PlaceEnvelope:
			// Up to 3.5 Debezium builds the value schema from every
			// envelope column, whatever error.on.missing says; 3.6 leaves
			// a missing one out with table.field.additional.missing=ignore,
			// which outboxrelay refuses here instead (docs/debezium.md).
			need(f.Column, "envelope field "+f.Alias, true)
		case PlaceHeader:
			if t.column(f.Column) != nil || !cfg.AdditionalFieldsOptional {
				need(f.Column, "header "+f.Alias, cfg.HeaderFormat != FormatRaw)
			}
		case PlacePartition:
			if c := t.column(f.Column); c != nil && !slices.Contains([]string{"int2", "int4", "int8"}, c.typName) {
				errs = append(errs, fmt.Errorf("partition column %q has type %s; it must be an integer", f.Column, c.typName))
			} else if c == nil && !cfg.AdditionalFieldsOptional {
				need(f.Column, "the partition", false)
			}
		}
	}
	if cfg.TimestampColumn != "" {
		if c := t.column(cfg.TimestampColumn); c == nil {
			need(cfg.TimestampColumn, "the event timestamp", false)
		} else if !slices.Contains([]string{"timestamp", "timestamptz", "int4", "int8"}, c.typName) {
			errs = append(errs, fmt.Errorf("timestamp column %q has type %s; it must be timestamp, timestamptz or bigint (epoch milliseconds)", c.name, c.typName))
		}
	}
	if cfg.SchemaVersionColumn != "" && r.c.envelope {
		if c := t.column(cfg.SchemaVersionColumn); c == nil {
			need(cfg.SchemaVersionColumn, "the schema version", false)
		} else if c.typName != "int2" && c.typName != "int4" {
			errs = append(errs, fmt.Errorf("schema version column %q has type %s; it must be an integer", c.name, c.typName))
		}
	}
	return errors.Join(errs...)
}

// route builds the record; any error is about this row.
func (r *Router) route(t *tableMeta, e *connector.Event) (connector.Message, error) {
	cfg := &r.cfg
	m := connector.Message{EventID: e.ID, Timestamp: e.CommitTime}

	topic, err := r.topic(e.AggregateType)
	if err != nil {
		return m, err
	}
	m.Topic = topic

	// Headers, in the order Kafka Connect sees them: the tracing span the
	// router activates first, then id, then the additional fields.
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

	if m.Key, err = r.key(t, e, topic); err != nil {
		return m, err
	}
	if m.Value, err = r.value(t, e, topic, envelope); err != nil {
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

func (r *Router) key(t *tableMeta, e *connector.Event, topic string) ([]byte, error) {
	if r.cfg.KeyFormat == FormatRaw {
		return []byte(e.AggregateID), nil
	}
	s, v, err := r.typed(t, e, r.cfg.Columns.AggregateID)
	if err != nil {
		return nil, err
	}
	b, err := r.convert(topic, true, r.cfg.KeyFormat, r.cfg.KeyDelegateFormat, s, v)
	if err != nil {
		return nil, fmt.Errorf("key from column %q: %w", r.cfg.Columns.AggregateID, err)
	}
	return b, nil
}

func (r *Router) value(t *tableMeta, e *connector.Event, topic string, envelope []AdditionalField) ([]byte, error) {
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
	schema, payload, err := r.typed(t, e, cfg.Columns.Payload)
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
	} else if payload != nil && cfg.ExpandJSONPayload {
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
	b, err := r.convert(topic, false, cfg.ValueFormat, cfg.ValueDelegateFormat, schema, payload)
	if err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	return b, nil
}

// convert writes a key or value of topic in format f, through the
// delegate format for what bytes cannot write.
func (r *Router) convert(topic string, isKey bool, f, delegate Format, s *Schema, v any) ([]byte, error) {
	if f == FormatAvro {
		return r.avro.encode(topic, isKey, s, v)
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
