package debezium

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// route builds the record, applies the transforms and converts it; any
// error is about this row.
func (r *Router) route(ctx context.Context, t *tableMeta, e *connector.Event) (connector.Message, error) {
	m := connector.Message{EventID: e.ID, Timestamp: e.CommitTime}
	rec, err := r.record(t, e)
	if rec != nil {
		m.Topic = rec.topic
	}
	if err != nil {
		return m, err
	}
	if len(r.c.chain) > 0 {
		routed := rec.topic
		if rec, err = r.c.chain.apply(rec); err != nil {
			return m, err
		}
		if rec == nil {
			m.Filtered = true
			return m, nil
		}
		m.Topic = rec.topic
		if rec.topic != routed {
			if err := connector.ValidTopic(rec.topic); err != nil {
				return m, fmt.Errorf("the transforms' topic: %w", err)
			}
		}
	}
	return r.write(ctx, rec, m)
}

// record builds the record the outbox router makes of the row: the
// topic, the headers in the order Kafka Connect sees them (the
// connector's context headers, the tracing span the router activates,
// then id, then the additional fields), the partition, key, value and
// timestamp. The record is returned with the topic even with an error, so
// that a dead letter says where the event was headed.
func (r *Router) record(t *tableMeta, e *connector.Event) (*connectRecord, error) {
	cfg := &r.cfg
	topic, err := r.topic(e.AggregateType)
	if err != nil {
		return nil, err
	}
	rec := &connectRecord{topic: topic, timestamp: e.CommitTime}
	for _, h := range r.context {
		rec.headers = append(rec.headers, r.stringHeader(h.Key, string(h.Value)))
	}
	if cfg.TracingColumn != "" {
		if raw, null, ok := e.Field(cfg.Columns, cfg.TracingColumn); ok && !null {
			hs, err := spanContext(raw)
			if err != nil {
				r.warn("span", "tracing headers left out", "event_id", e.ID, "origin", e.Origin, "err", err)
			}
			for _, h := range hs {
				rec.headers = append(rec.headers, r.stringHeader(h.key, h.value))
			}
		}
	}
	id, err := r.header(t, e, "id", cfg.Columns.ID)
	if err != nil {
		return rec, err
	}
	rec.headers = append(rec.headers, id)
	envelope, err := r.additionalFields(t, e, rec)
	if err != nil {
		return rec, err
	}
	if rec.key, err = r.key(t, e); err != nil {
		return rec, err
	}
	if rec.value, err = r.value(t, e, envelope); err != nil {
		return rec, err
	}
	if cfg.TimestampColumn != "" {
		raw, null, ok := e.Field(cfg.Columns, cfg.TimestampColumn)
		if !ok {
			return rec, fmt.Errorf("the row has no timestamp column %q", cfg.TimestampColumn)
		}
		if !null {
			ms, err := t.column(cfg.TimestampColumn).timestampMillis(raw)
			if err != nil {
				return rec, err
			}
			rec.timestamp = time.UnixMilli(ms)
		}
	}
	return rec, nil
}

// additionalFields adds the header and partition placements to rec and
// returns the envelope ones.
func (r *Router) additionalFields(t *tableMeta, e *connector.Event, rec *connectRecord) ([]AdditionalField, error) {
	cfg := &r.cfg
	var envelope []AdditionalField
	for _, f := range r.c.fields {
		_, _, present := e.Field(cfg.Columns, f.Column)
		if !present && f.Placement != PlaceEnvelope {
			if cfg.AdditionalFieldsOptional {
				continue
			}
			return nil, fmt.Errorf("the row has no column %q for %s %q (routing.additional_fields_required; Debezium's table.field.additional.missing)", f.Column, f.Placement, f.Alias)
		}
		switch f.Placement {
		case PlaceHeader:
			h, err := r.header(t, e, f.Alias, f.Column)
			if err != nil {
				return nil, err
			}
			rec.headers = append(rec.headers, h)
		case PlacePartition:
			raw, null, _ := e.Field(cfg.Columns, f.Column)
			if null {
				continue
			}
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n < 0 || n > math.MaxInt32 {
				return nil, fmt.Errorf("partition column %q holds %q, which is not a partition number", f.Column, raw)
			}
			p := int32(n)
			rec.partition = &p
		case PlaceEnvelope:
			envelope = append(envelope, f)
		}
	}
	return envelope, nil
}

// header is the header key from the named column: its text with
// header_format raw, else its Connect schema and value.
func (r *Router) header(t *tableMeta, e *connector.Event, key, column string) (connectHeader, error) {
	label := fmt.Sprintf("header from column %q", column)
	if r.cfg.HeaderFormat == FormatRaw {
		raw, null, _ := e.Field(r.cfg.Columns, column)
		if null {
			raw = nil
		}
		return connectHeader{key: key, raw: raw, isRaw: true, label: label}, nil
	}
	s, v, err := r.typed(t, e, column)
	if err != nil {
		return connectHeader{}, err
	}
	return connectHeader{key: key, schema: s, value: v, label: label}, nil
}

// stringHeader is a header that Kafka Connect holds as a required string
// (the context and tracing headers).
func (r *Router) stringHeader(key, v string) connectHeader {
	if r.cfg.HeaderFormat == FormatRaw {
		return connectHeader{key: key, raw: []byte(v), isRaw: true, label: "header " + key}
	}
	return connectHeader{key: key, schema: &Schema{Type: TypeString}, value: v, label: "header " + key}
}

// key is the record key: the aggregate id's text with key_format raw,
// else its column's schema and value.
func (r *Router) key(t *tableMeta, e *connector.Event) (recordPart, error) {
	label := fmt.Sprintf("key from column %q", r.cfg.Columns.AggregateID)
	if r.cfg.KeyFormat == FormatRaw {
		if e.AggregateIDNull {
			return recordPart{isRaw: true, label: label}, nil
		}
		return recordPart{raw: []byte(e.AggregateID), isRaw: true, label: label}, nil
	}
	s, v, err := r.typed(t, e, r.cfg.Columns.AggregateID)
	if err != nil {
		return recordPart{}, err
	}
	return recordPart{schema: s, value: v, label: label}, nil
}

// value is the record value: the payload as stored with value_format
// raw, else the payload's (or the expanded payload's, or the envelope's)
// schema and value; no schema and no value for a tombstone.
func (r *Router) value(t *tableMeta, e *connector.Event, envelope []AdditionalField) (recordPart, error) {
	cfg := &r.cfg
	if cfg.ValueFormat == FormatRaw {
		blank := e.Payload == nil
		if !blank && cfg.TombstoneOnEmptyPayload {
			c := t.column(cfg.Columns.Payload)
			blank = c != nil && c.typName != "bytea" && isBlank(e.Payload)
		}
		if blank && cfg.TombstoneOnEmptyPayload {
			return recordPart{isRaw: true, label: "value"}, nil
		}
		return recordPart{raw: e.Payload, isRaw: true, label: "value"}, nil
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
		return recordPart{}, err
	}
	// Debezium's delete check, payload == null ||
	// payload.toString().trim().isEmpty(), on the payload Struct.get gave:
	// a NULL with a column default is not blank; bytes never are.
	blank := payload == nil
	if text, ok := payload.(string); ok {
		blank = isBlank([]byte(text))
		if cfg.ExpandJSONPayload {
			if schema, payload, err = r.expandText(e, schema, text, len(envelope) > 0); err != nil {
				return recordPart{}, err
			}
		}
	} else if payload != nil && cfg.ExpandJSONPayload && e.Message == nil {
		r.warn("expand", "payload is not text; sent as it is, as Debezium does", "event_id", e.ID, "origin", e.Origin)
	}
	if blank && cfg.TombstoneOnEmptyPayload {
		return recordPart{label: "value"}, nil
	}
	if len(envelope) > 0 {
		if schema, payload, err = r.envelope(t, e, schema, payload, envelope); err != nil {
			return recordPart{}, err
		}
	}
	return recordPart{schema: schema, value: payload, label: "value"}, nil
}

// expandText is table.expand.json.payload of a text payload: the struct
// its JSON object makes, or the text as it is where Debezium sends it so.
func (r *Router) expandText(e *connector.Event, schema *Schema, text string, enveloped bool) (*Schema, any, error) {
	s, v, err := r.exp.expand(r.cfg.Columns.Payload, text)
	switch {
	case err == nil:
		return s, v, nil
	case errors.Is(err, errNotExpandable):
		r.warn("expand", "payload is not a JSON object; sent as a string, as Debezium does", "event_id", e.ID, "origin", e.Origin)
	case errors.Is(err, errTopLevelArray) && !enveloped && r.cfg.ValueFormat == FormatString:
		// StringConverter writes the text whatever schema Debezium
		// inferred for it.
	default:
		return nil, nil, err
	}
	return schema, text, nil
}

// write converts the record's parts into the message, as the converters
// do after the transforms: with the record's final topic, which names the
// Schema Registry subjects.
func (r *Router) write(ctx context.Context, rec *connectRecord, m connector.Message) (connector.Message, error) {
	cfg := &r.cfg
	m.Topic, m.Partition, m.Timestamp = rec.topic, rec.partition, rec.timestamp
	for _, h := range rec.headers {
		v := h.raw
		if !h.isRaw {
			var err error
			if v, err = r.headerBytes(h); err != nil {
				return m, err
			}
		}
		m.Headers = append(m.Headers, connector.Header{Key: h.key, Value: v})
	}
	var err error
	if m.Key, err = r.partBytes(ctx, rec.topic, true, cfg.KeyFormat, cfg.KeyDelegateFormat, rec.key); err != nil {
		return m, err
	}
	if m.Value, err = r.partBytes(ctx, rec.topic, false, cfg.ValueFormat, cfg.ValueDelegateFormat, rec.value); err != nil {
		return m, err
	}
	return m, nil
}

// headerBytes converts a typed header with the header format; a string
// header with simple is its text, as SimpleHeaderConverter writes it.
func (r *Router) headerBytes(h connectHeader) ([]byte, error) {
	if s, ok := h.value.(string); ok && r.cfg.HeaderFormat == FormatSimple && h.schema != nil && h.schema.Type == TypeString && h.schema.Name == "" {
		return []byte(s), nil
	}
	b, err := convertHeader(r.cfg.HeaderFormat, h.schema, h.value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.label, err)
	}
	return b, nil
}

// partBytes converts the key or the value; a tombstone (no schema, no
// value) is a null one whatever the converter.
func (r *Router) partBytes(ctx context.Context, topic string, isKey bool, f, delegate Format, p recordPart) ([]byte, error) {
	if p.isRaw {
		return p.raw, nil
	}
	if p.schema == nil && p.value == nil {
		return nil, nil
	}
	b, err := r.convert(ctx, topic, isKey, f, delegate, p.schema, p.value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.label, err)
	}
	return b, nil
}
