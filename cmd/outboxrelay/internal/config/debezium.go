package config

import (
	"errors"
	"fmt"

	"github.com/outboxrelay/outboxrelay/debezium"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// DebeziumRouting holds the routing keys that reproduce Debezium's Outbox
// Event Router and Kafka Connect's converters. They sit under routing:
// beside topic_prefix, topic and type_header; while none is set, records
// are outboxrelay's own (the payload as stored, key and id as text).
type DebeziumRouting struct {
	TopicRegex               string               `yaml:"topic_regex" doc:"Regex matched against the whole aggregate type to name the topic with topic_replacement (Debezium's route.topic.regex; RE2 syntax)." default:"(?<routedByValue>.*)"`
	TopicReplacement         string               `yaml:"topic_replacement" doc:"Topic of an aggregate type topic_regex matches, with $1 and ${name} group references (route.topic.replacement); overrides topic_prefix." default:"(none)"`
	AdditionalFields         []string             `yaml:"additional_fields" doc:"More columns in each record, each column:placement[:alias], placement header, envelope or partition (table.fields.additional.placement)." default:"(none)"`
	AdditionalFieldsRequired *bool                `yaml:"additional_fields_required" doc:"A header or partition column missing from a row is an error; false leaves it out (table.field.additional.missing=ignore, before Debezium 3.6 table.fields.additional.error.on.missing=false)." default:"true"`
	ExpandJSONPayload        *bool                `yaml:"expand_json_payload" doc:"Write a JSON payload as a JSON object instead of a string, as table.expand.json.payload; needs value_format json, json+schema, string, avro, json_sr or protobuf." default:"false"`
	JSONNullFields           string               `yaml:"json_null_fields" doc:"Null fields of an expanded payload: ignore drops them, optional_bytes keeps them (table.json.payload.null.behavior)." default:"ignore"`
	TimestampColumn          string               `yaml:"timestamp_column" doc:"Column holding the record timestamp (timestamp, timestamptz or bigint epoch ms) instead of the commit time (table.field.event.timestamp)." default:"(commit time)"`
	TombstoneOnEmptyPayload  *bool                `yaml:"tombstone_on_empty_payload" doc:"A NULL or blank payload makes a record with a null value (route.tombstone.on.empty.payload)." default:"false"`
	TracingColumn            string               `yaml:"tracing_column" doc:"Column with the span context whose W3C traceparent and tracestate become the first headers (tracing.span.context.field): Java Properties text as Debezium's extension writes it, a bare traceparent, or a JSON object of headers as the outbox package writes it." default:"(none)"`
	SchemaVersionColumn      string               `yaml:"schema_version_column" doc:"Integer column giving the version of the envelope struct schema (table.field.event.schema.version)." default:"(none)"`
	SchemaTopicPrefix        string               `yaml:"schema_topic_prefix" doc:"Debezium's topic.prefix, which names the envelope struct schema <prefix>.<schema>.<table>.<aggregate type>.Value." default:"(none)"`
	KeyFormat                Format               `yaml:"key_format" doc:"raw (the aggregate id's text), or Debezium's key as Kafka Connect writes it: string (StringConverter), json, json+schema (JsonConverter schemas.enable false/true), bytes (ByteArrayConverter, or Debezium's pass-through BinaryDataConverter/ByteBufferConverter: a bytea column's bytes unchanged), avro, json_sr, protobuf (Confluent's AvroConverter, JsonSchemaConverter, ProtobufConverter: the schema registered in schema_registry, the Confluent wire format)." default:"raw"`
	ValueFormat              Format               `yaml:"value_format" doc:"raw (the payload as stored), or Debezium's value as Kafka Connect writes it: string, json, json+schema, bytes, avro, json_sr or protobuf, as key_format. raw and bytes both write a bytea payload's bytes unchanged, an empty one as an empty value and only NULL as a null value." default:"raw"`
	KeyDelegateFormat        DelegateFormat       `yaml:"key_delegate_format" doc:"With key_format bytes, how a key column that is not bytea is written: string, json or json+schema (BinaryDataConverter's delegate.converter.type). Unset, such a column is refused at start." default:"(none)"`
	ValueDelegateFormat      DelegateFormat       `yaml:"value_delegate_format" doc:"With value_format bytes, how a value that is not bytes (a payload column that is not bytea, envelope fields, an expanded payload) is written: string, json or json+schema, as key_delegate_format." default:"(none)"`
	HeaderFormat             HeaderFormat         `yaml:"header_format" doc:"raw (column text), or headers as Kafka Connect writes them: simple (SimpleHeaderConverter), json or json+schema (JsonConverter)." default:"raw"`
	TimePrecision            TimePrecision        `yaml:"time_precision" doc:"How date, time and timestamp columns in keys, headers and envelopes are typed, as Debezium's time.precision.mode: adaptive, adaptive_time_microseconds or connect." default:"adaptive"`
	DecimalHandling          Decimal              `yaml:"decimal_handling" doc:"How numeric columns in keys, headers and envelopes are written, as Debezium's decimal.handling.mode: precise (Connect's Decimal; VariableScaleDecimal for a numeric without precision), double or string. precise is refused at start for a numeric key, payload or envelope field with protobuf." default:"precise"`
	IntervalHandling         Interval             `yaml:"interval_handling" doc:"How interval columns in keys, headers and envelopes are written, as Debezium's interval.handling.mode: numeric (microseconds, months of 30.4375 days) or string (ISO 8601)." default:"numeric"`
	ContextHeaders           *bool                `yaml:"context_headers" doc:"Start every record with Debezium's __debezium.context.* headers (connectorLogicalName: schema_topic_prefix, taskId 0, connectorName postgresql, runId new at each start), as extended.headers.enabled does in Debezium 3.2 and later." default:"false"`
	Transforms               []debezium.Transform `yaml:"transforms" doc:"Kafka Connect's transforms applied after the router, in order, to the record it makes, before the formats write it: a list of {name, type, options, predicate, negate}; type is the class (RegexRouter, TimestampRouter, InsertHeader, DropHeaders, HeaderFrom$Key/$Value, InsertField$Key/$Value, ReplaceField$Key/$Value, ValueToKey, Filter; the package may be left out), options a map of its Kafka Connect options, predicate a name among predicates. Needs key_format, value_format and header_format other than raw where a transform works on them. File only." default:"(none)"`
	Predicates               []debezium.Predicate `yaml:"predicates" doc:"The predicates transforms name: a list of {name, type, options}; type TopicNameMatches (options.pattern), HasHeaderKey (options.name) or RecordIsTombstone. File only." default:"(none)"`
}

// TimePrecision is routing.time_precision.
type TimePrecision string

// Values lists every TimePrecision.
func (TimePrecision) Values() []string {
	return []string{string(debezium.TimeAdaptive), string(debezium.TimeAdaptiveMicroseconds), string(debezium.TimeConnect)}
}

// Decimal is routing.decimal_handling.
type Decimal string

// Values lists every Decimal.
func (Decimal) Values() []string {
	return []string{string(debezium.DecimalPrecise), string(debezium.DecimalDouble), string(debezium.DecimalString)}
}

// Interval is routing.interval_handling.
type Interval string

// Values lists every Interval.
func (Interval) Values() []string {
	return []string{string(debezium.IntervalNumeric), string(debezium.IntervalString)}
}

// Format is how routing.key_format or routing.value_format writes a key
// or a value; the debezium package lists the values.
type Format string

// Values lists every Format.
func (Format) Values() []string { return formatNames(debezium.ValueFormats) }

// DelegateFormat is how routing.key_delegate_format or
// routing.value_delegate_format writes what format bytes cannot.
type DelegateFormat string

// Values lists every DelegateFormat.
func (DelegateFormat) Values() []string { return formatNames(debezium.DelegateFormats) }

// HeaderFormat is how routing.header_format writes headers.
type HeaderFormat string

// Values lists every HeaderFormat.
func (HeaderFormat) Values() []string { return formatNames(debezium.HeaderFormats) }

func formatNames(fs []debezium.Format) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}

// used reports whether any key is set, which makes the Debezium router
// replace outboxrelay's own.
func (d *DebeziumRouting) used() bool {
	return d.TopicRegex != "" || d.TopicReplacement != "" || len(d.AdditionalFields) > 0 ||
		d.AdditionalFieldsRequired != nil || d.ExpandJSONPayload != nil || d.JSONNullFields != "" ||
		d.TimestampColumn != "" || d.TombstoneOnEmptyPayload != nil || d.TracingColumn != "" ||
		d.SchemaVersionColumn != "" || d.SchemaTopicPrefix != "" || d.KeyFormat != "" ||
		d.ValueFormat != "" || d.HeaderFormat != "" || d.KeyDelegateFormat != "" || d.ValueDelegateFormat != "" ||
		d.TimePrecision != "" || d.DecimalHandling != "" || d.IntervalHandling != "" || d.ContextHeaders != nil ||
		len(d.Transforms) > 0 || len(d.Predicates) > 0
}

// DebeziumRouter is the configuration of the Debezium router, or nil
// when no Debezium routing key is set and outboxrelay's own routing
// applies.
func (c *Config) DebeziumRouter() *debezium.RouterConfig {
	d := &c.Routing.Debezium
	if !d.used() {
		return nil
	}
	return &debezium.RouterConfig{
		PostgresURL:              c.Postgres.URL,
		Network:                  c.Postgres.Network(),
		Table:                    c.Outbox.Table,
		Tables:                   c.Outbox.tableNames(),
		TablePatterns:            len(c.Outbox.TablePatterns) > 0,
		Columns:                  c.Outbox.Columns,
		TopicPrefix:              c.Routing.TopicPrefix,
		Topic:                    c.Routing.Topic,
		TypeHeader:               c.Routing.TypeHeader,
		TopicRegex:               d.TopicRegex,
		TopicReplacement:         d.TopicReplacement,
		AdditionalFields:         d.AdditionalFields,
		AdditionalFieldsOptional: d.AdditionalFieldsRequired != nil && !*d.AdditionalFieldsRequired,
		ExpandJSONPayload:        d.ExpandJSONPayload != nil && *d.ExpandJSONPayload,
		JSONNullFields:           d.JSONNullFields,
		TimestampColumn:          d.TimestampColumn,
		TombstoneOnEmptyPayload:  d.TombstoneOnEmptyPayload != nil && *d.TombstoneOnEmptyPayload,
		TracingColumn:            d.TracingColumn,
		SchemaVersionColumn:      d.SchemaVersionColumn,
		SchemaTopicPrefix:        d.SchemaTopicPrefix,
		KeyFormat:                debezium.Format(d.KeyFormat),
		ValueFormat:              debezium.Format(d.ValueFormat),
		HeaderFormat:             debezium.Format(d.HeaderFormat),
		KeyDelegateFormat:        debezium.Format(d.KeyDelegateFormat),
		ValueDelegateFormat:      debezium.Format(d.ValueDelegateFormat),
		TimePrecision:            debezium.TimePrecision(d.TimePrecision),
		DecimalHandling:          debezium.DecimalHandling(d.DecimalHandling),
		IntervalHandling:         debezium.IntervalHandling(d.IntervalHandling),
		ContextHeaders:           d.ContextHeaders != nil && *d.ContextHeaders,
		Registry:                 c.SchemaRegistry.registry(),
		Transforms:               d.Transforms,
		Predicates:               d.Predicates,
	}
}

// validateDebezium checks the Debezium routing keys, when any is set.
func (c *Config) validateDebezium() error {
	rc := c.DebeziumRouter()
	if rc == nil {
		if c.SchemaRegistry.set() {
			return errors.New("schema_registry is set, but neither routing.key_format nor routing.value_format is avro, json_sr or protobuf, which are all it serves")
		}
		return nil
	}
	if c.SchemaRegistry.set() && !rc.UsesRegistry() {
		return errors.New("schema_registry is set, but neither routing.key_format nor routing.value_format is avro, json_sr or protobuf, which are all it serves")
	}
	if c.Routing.HeadersColumn != "" {
		return fmt.Errorf("routing.headers_column %q is set with Debezium routing keys, whose records it would not reach; with those, name the trace context's column in routing.tracing_column (it reads a headers object too) and other columns in routing.additional_fields", c.Routing.HeadersColumn)
	}
	// postgres.* are checked with the source, which uses them too: say
	// each problem once, not again under routing.
	rc.Network = pgsql.Network{}
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	return nil
}

// LoadTranslated is Load for `run --debezium-config`: the configuration
// translated from a Debezium file, then the file at path (if any) on top
// of it, then the environment, defaults and validation.
func LoadTranslated(translated []byte, path string, environ []string) (*Config, error) {
	return load(translated, path, environ, true)
}

// ReadTranslated is Read with a translated Debezium configuration under
// the file, for `init --debezium-config`.
func ReadTranslated(translated []byte, path string, environ []string) (*Config, error) {
	return load(translated, path, environ, false)
}
