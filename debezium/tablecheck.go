package debezium

import (
	"errors"
	"fmt"
	"slices"
)

// tableCheck gathers the problems one table has with the configuration.
type tableCheck struct {
	t    *tableMeta
	errs []error
}

func (tc *tableCheck) fail(format string, args ...any) {
	tc.errs = append(tc.errs, fmt.Errorf(format, args...))
}

// need requires the column name, for what; typed also requires that its
// type has a Connect schema.
func (tc *tableCheck) need(name, what string, typed bool) {
	c := tc.t.column(name)
	if c == nil {
		tc.fail("outbox table %s.%s has no column %q (%s)", tc.t.schema, tc.t.table, name, what)
		return
	}
	if typed {
		if _, err := c.schema(); err != nil {
			tc.errs = append(tc.errs, fmt.Errorf("%s: %w", what, err))
		}
	}
}

// bytesOnly: Debezium gives a bytes key or payload column the BYTES
// schema, which is all ByteArrayConverter accepts ("Invalid schema type
// for ByteArrayConverter"), and all BinaryDataConverter writes itself
// without a delegate.converter.type (fromConnectData, in
// assertDelegateProvided). Kafka Connect fails on the first record; the
// column's type says so before any.
func (tc *tableCheck) bytesOnly(name, what string, delegate Format) {
	c := tc.t.column(name)
	if c == nil || c.typName == "bytea" || delegate != "" {
		return
	}
	tc.fail("%s column %q has type %s, and routing.%s_format bytes (ByteArrayConverter, or Debezium's BinaryDataConverter/ByteBufferConverter without a delegate) writes only bytea columns: "+
		"make the column bytea, set routing.%s_delegate_format (with BinaryDataConverter, %s.converter.delegate.converter.type) to write it as string, json or json+schema, or choose another %s_format",
		what, name, c.typName, what, what, what, what)
}

// protobufLogical refuses, with format protobuf, a column of Connect's
// logical types (connectLogicalNames: the Decimal of decimal.handling.mode
// precise, the Date, Time and Timestamp of time.precision.mode connect),
// which are messages of their own in Confluent's ProtobufData
// (confluent.type.Decimal, google.type.Date, ...) that outboxrelay does
// not write; Debezium's VariableScaleDecimal is refused with them, as its
// value has not been checked against ProtobufData. Refused here rather
// than at the first event (protoPlanOf).
func (tc *tableCheck) protobufLogical(name, what string, f Format) {
	c := tc.t.column(name)
	if c == nil || f != FormatProtobuf {
		return
	}
	s, err := c.schema()
	switch {
	case err != nil:
	case s.Name == nameDecimal || s.Name == nameVariableScaleDecimal:
		tc.fail("%s column %q has type numeric, which decimal.handling.mode precise (Debezium's default) writes as %s; outboxrelay does not write that with format %s: set decimal.handling.mode double or string (routing.decimal_handling), or use avro, json_sr, json or json+schema",
			what, name, s.Name, f)
	case connectLogicalNames[s.Name]:
		tc.fail("%s column %q has type %s, which time.precision.mode connect writes as %s; outboxrelay does not write that with format %s: set time.precision.mode adaptive or adaptive_time_microseconds (routing.time_precision), or use avro, json_sr, json or json+schema",
			what, name, c.typName, s.Name, f)
	}
}

// check reports, at once, every column the configuration needs that the
// table lacks or whose type cannot be written in the configured format.
func (r *Router) check(t *tableMeta) error {
	tc := &tableCheck{t: t}
	cfg := r.cfg
	tc.need(cfg.Columns.ID, "the event id", cfg.HeaderFormat != FormatRaw)
	tc.need(cfg.Columns.AggregateID, "the record key", cfg.KeyFormat != FormatRaw)
	tc.need(cfg.Columns.Payload, "the payload", cfg.ValueFormat != FormatRaw)
	tc.need(cfg.Columns.AggregateType, "the topic", false)
	tc.protobufLogical(cfg.Columns.AggregateID, "key", cfg.KeyFormat)
	tc.protobufLogical(cfg.Columns.Payload, "payload", cfg.ValueFormat)
	for _, f := range r.c.fields {
		if f.Placement == PlaceEnvelope {
			tc.protobufLogical(f.Column, "envelope field "+f.Alias, cfg.ValueFormat)
		}
	}
	if cfg.KeyFormat == FormatBytes {
		tc.bytesOnly(cfg.Columns.AggregateID, "key", cfg.KeyDelegateFormat)
	}
	if cfg.ValueFormat == FormatBytes && !r.c.envelope {
		tc.bytesOnly(cfg.Columns.Payload, "value", cfg.ValueDelegateFormat)
	}
	r.checkFields(tc)
	r.checkColumnTypes(tc)
	return errors.Join(tc.errs...)
}

// checkFields checks the columns of the additional fields.
func (r *Router) checkFields(tc *tableCheck) {
	cfg := r.cfg
	for _, f := range r.c.fields {
		switch f.Placement {
		case PlaceEnvelope:
			// Up to 3.5 Debezium builds the value schema from every
			// envelope column, whatever error.on.missing says; 3.6 leaves
			// a missing one out with table.field.additional.missing=ignore,
			// which outboxrelay refuses here instead (docs/debezium.md).
			tc.need(f.Column, "envelope field "+f.Alias, true)
		case PlaceHeader:
			if tc.t.column(f.Column) != nil || !cfg.AdditionalFieldsOptional {
				tc.need(f.Column, "header "+f.Alias, cfg.HeaderFormat != FormatRaw)
			}
		case PlacePartition:
			if c := tc.t.column(f.Column); c != nil && !slices.Contains([]string{"int2", "int4", "int8"}, c.typName) {
				tc.fail("partition column %q has type %s; it must be an integer", f.Column, c.typName)
			} else if c == nil && !cfg.AdditionalFieldsOptional {
				tc.need(f.Column, "the partition", false)
			}
		}
	}
}

// checkColumnTypes checks the timestamp and schema version columns.
func (r *Router) checkColumnTypes(tc *tableCheck) {
	cfg := r.cfg
	if cfg.TimestampColumn != "" {
		if c := tc.t.column(cfg.TimestampColumn); c == nil {
			tc.need(cfg.TimestampColumn, "the event timestamp", false)
		} else if !slices.Contains([]string{"timestamp", "timestamptz", "int4", "int8"}, c.typName) {
			tc.fail("timestamp column %q has type %s; it must be timestamp, timestamptz or bigint (epoch milliseconds)", c.name, c.typName)
		}
	}
	if cfg.SchemaVersionColumn != "" && r.c.envelope {
		if c := tc.t.column(cfg.SchemaVersionColumn); c == nil {
			tc.need(cfg.SchemaVersionColumn, "the schema version", false)
		} else if c.typName != "int2" && c.typName != "int4" {
			tc.fail("schema version column %q has type %s; it must be an integer", c.name, c.typName)
		}
	}
}
