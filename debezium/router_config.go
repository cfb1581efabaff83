package debezium

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
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
	// TablePatterns: the source matches outbox tables by pattern
	// (outbox.table_patterns), so Table has no default, and a table
	// neither names is typed by its own catalog when its first event
	// comes.
	TablePatterns bool
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

	// TimePrecision, DecimalHandling and IntervalHandling are the
	// connector's time.precision.mode, decimal.handling.mode and
	// interval.handling.mode: how date, time, timestamp, numeric and
	// interval columns are typed where the router places them. Defaults
	// Debezium's: adaptive, precise (Connect's Decimal, or
	// VariableScaleDecimal for a numeric without precision; refused with
	// protobuf), numeric.
	TimePrecision    TimePrecision
	DecimalHandling  DecimalHandling
	IntervalHandling IntervalHandling
	// ContextHeaders is the connector's extended.headers.enabled (Debezium
	// 3.2 and later, on by default there): every record starts with the
	// __debezium.context.* headers, connectorLogicalName the
	// SchemaTopicPrefix. Default false: outboxrelay's records have none.
	ContextHeaders bool

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
	// Registry is the Schema Registry of a KeyFormat or ValueFormat that
	// needs one (avro, json_sr, protobuf); required with them.
	Registry RegistryConfig

	// Transforms are Kafka Connect's transforms applied, in order, to the
	// record the router makes, before its key, value and headers are
	// converted; Predicates are the predicates they name. Default none.
	Transforms []Transform
	Predicates []Predicate
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
	if c.Table == "" && len(c.Tables) == 0 && !c.TablePatterns {
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
	if c.TimePrecision == "" {
		c.TimePrecision = TimeAdaptive
	}
	if c.DecimalHandling == "" {
		c.DecimalHandling = DecimalPrecise
	}
	if c.IntervalHandling == "" {
		c.IntervalHandling = IntervalNumeric
	}
	if c.UsesRegistry() {
		c.Registry.setDefaults()
	}
}

// UsesRegistry reports whether the key or the value is written in a
// format that needs the Schema Registry (avro, json_sr, protobuf).
func (c *RouterConfig) UsesRegistry() bool {
	return registryFormat(c.KeyFormat) != nil || registryFormat(c.ValueFormat) != nil
}

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
	// chain are the transforms.
	chain chain
}

// compile validates c and makes what routing needs of it; its error
// joins every problem.
func (c *RouterConfig) compile() (*compiled, error) {
	out := &compiled{}
	var errs []error
	if c.PostgresURL == "" {
		errs = append(errs, errors.New("the Debezium router needs postgres.url to read the outbox table's column types"))
	}
	errs = append(errs, c.compileTables(out)...)
	if err := c.Columns.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Network.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.compileTopics(out)...)
	errs = append(errs, c.compileFields(out)...)
	errs = append(errs, c.validateFormats(out)...)
	if c.UsesRegistry() {
		errs = append(errs, c.validateRegistry(out)...)
	}
	errs = append(errs, c.validateModes()...)
	if len(c.Transforms) > 0 || len(c.Predicates) > 0 {
		var err error
		raw := rawParts{key: c.KeyFormat == FormatRaw, value: c.ValueFormat == FormatRaw, headers: c.HeaderFormat == FormatRaw}
		if out.chain, err = compileChain(c.Transforms, c.Predicates, raw, out.envelope || c.ExpandJSONPayload); err != nil {
			errs = append(errs, fmt.Errorf("routing.transforms: %w", err))
		}
	}
	if c.ContextHeaders && c.SchemaTopicPrefix == "" {
		errs = append(errs, errors.New("routing.context_headers: the connectorLogicalName header is the connector's topic.prefix; set routing.schema_topic_prefix"))
	}
	return out, errors.Join(errs...)
}

// compileTables names the outbox tables schema.table.
func (c *RouterConfig) compileTables(out *compiled) (errs []error) {
	names := c.Tables
	if len(names) == 0 && c.Table != "" {
		names = []string{c.Table}
	}
	for _, name := range names {
		schema, table, err := pgsql.SplitTable(name)
		if err != nil {
			errs = append(errs, err)
		}
		out.tables = append(out.tables, schema+"."+table)
	}
	return errs
}

// compileTopics makes the topic router of route.topic.regex and
// route.topic.replacement, or checks routing.topic.
func (c *RouterConfig) compileTopics(out *compiled) (errs []error) {
	switch {
	case c.TopicRegex != "" || c.TopicReplacement != "":
		if c.Topic != "" {
			errs = append(errs, errors.New("routing.topic and routing.topic_regex/topic_replacement both say where events go; set one"))
		}
		regex, repl := cmp.Or(c.TopicRegex, DefaultTopicRegex), cmp.Or(c.TopicReplacement, DefaultTopicReplacement)
		tr, err := newTopicRouter(regex, repl)
		if err != nil {
			errs = append(errs, err)
		}
		out.topics = tr
	case c.Topic != "":
		if err := connector.ValidTopic(c.Topic); err != nil {
			errs = append(errs, fmt.Errorf("routing.topic: %w", err))
		}
	}
	return errs
}

// compileFields parses the additional fields, the type header among them.
func (c *RouterConfig) compileFields(out *compiled) (errs []error) {
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
	return errs
}

// validateFormats checks the key, value and header formats, their
// delegates, and that the value format can write a struct where the
// configuration makes one.
func (c *RouterConfig) validateFormats(out *compiled) (errs []error) {
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
		errs = append(errs, fmt.Errorf("envelope fields make the value a struct, which value_format %q cannot write; use json, json+schema, string, avro, json_sr or protobuf, or bytes with a value_delegate_format", c.ValueFormat))
	}
	if c.ExpandJSONPayload && !structured {
		errs = append(errs, fmt.Errorf("expand_json_payload makes the payload a struct, which value_format %q cannot write; use json, json+schema, string, avro, json_sr or protobuf, or bytes with a value_delegate_format", c.ValueFormat))
	}
	return errs
}

// validateRegistry checks the Schema Registry settings against the
// formats that use it.
func (c *RouterConfig) validateRegistry(out *compiled) []error {
	errs := c.Registry.validate()
	if st := c.Registry.SubjectNameStrategy; st == SubjectRecord || st == SubjectTopicRecord {
		// Confluent's RecordNameStrategy fails on any schema that is not
		// a record; only the envelope makes one.
		if registryFormat(c.KeyFormat) != nil {
			errs = append(errs, fmt.Errorf("schema_registry.subject_name_strategy %s names subjects after records, and the key is a column, never a record; use topic", st))
		}
		if registryFormat(c.ValueFormat) != nil && !out.envelope {
			errs = append(errs, fmt.Errorf("schema_registry.subject_name_strategy %s names subjects after records, and without envelope fields the value is no record; use topic, or place fields in the envelope", st))
		}
	}
	if c.Registry.UseLatestVersion && (c.KeyFormat == FormatProtobuf || c.ValueFormat == FormatProtobuf) {
		// Writing with another schema than the derived one needs
		// that schema's field numbers, read from its .proto text,
		// which outboxrelay does not parse.
		errs = append(errs, errors.New("schema_registry.use_latest_version is not supported with format protobuf; turn it off, so that records are written with the schema ProtobufData derives"))
	}
	return errs
}

// validateModes checks the enumerated settings of value typing.
func (c *RouterConfig) validateModes() (errs []error) {
	switch c.JSONNullFields {
	case "ignore", "optional_bytes":
	default:
		errs = append(errs, fmt.Errorf("routing.json_null_fields: %q is not ignore or optional_bytes", c.JSONNullFields))
	}
	switch c.TimePrecision {
	case TimeAdaptive, TimeAdaptiveMicroseconds, TimeConnect:
	default:
		errs = append(errs, fmt.Errorf("routing.time_precision: %q is not adaptive, adaptive_time_microseconds or connect", c.TimePrecision))
	}
	switch c.DecimalHandling {
	case DecimalPrecise, DecimalDouble, DecimalString:
	default:
		errs = append(errs, fmt.Errorf("routing.decimal_handling: %q is not precise, double or string", c.DecimalHandling))
	}
	switch c.IntervalHandling {
	case IntervalNumeric, IntervalString:
	default:
		errs = append(errs, fmt.Errorf("routing.interval_handling: %q is not numeric or string", c.IntervalHandling))
	}
	return errs
}

func joinFormats(fs []Format) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}
