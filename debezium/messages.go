package debezium

import (
	"fmt"

	"github.com/outboxrelay/outboxrelay/connector"
)

// An event from a logical decoding message (cdc.message_prefixes) is
// routed as Debezium routes one: its DecodeLogicalDecodingMessageContent
// transform parses the content with Jackson and converts it with
// JsonSchemaData (null fields ignored, the root unnamed) into the "after"
// struct of an insert, whose fields the outbox router then reads as a
// row's columns. So every field is optional, a string is a plain string
// (not a uuid, not io.debezium.data.Json), and the payload is what
// JsonSchemaData makes of its JSON value: a struct for an object, named
// by its path from the unnamed root, which is the payload field's name,
// as with routing.expand_json_payload. (DecodeLogicalDecodingMessageContent
// .convertLogicalDecodingMessageContentBytesToStruct and getUpdatedValue;
// JsonSchemaData.toConnectSchema; EventRouterDelegate reads the after
// struct's fields by name.)

// messageTable is the catalog of a message's event: each field it has, as
// an optional string.
func messageTable(cols connector.ColumnMap, e *connector.Event) *tableMeta {
	t := &tableMeta{columns: make([]*column, 0, 5+len(e.Extra))}
	for _, name := range []string{cols.ID, cols.AggregateType, cols.AggregateID, cols.Type, cols.Payload} {
		t.columns = append(t.columns, &column{name: name, typName: "text"})
	}
	for _, c := range e.Extra {
		t.columns = append(t.columns, &column{name: c.Name, typName: "text"})
	}
	return t
}

// messagePayload is the schema and value of a message's payload: a string
// as it is; any other JSON value as JsonSchemaData converts it.
func (r *Router) messagePayload(e *connector.Event) (*Schema, any, error) {
	if e.Payload == nil {
		return optString, nil, nil
	}
	if e.Message.PayloadText {
		return optString, string(e.Payload), nil
	}
	text := string(e.Payload)
	if err := checkExpandLimits(r.cfg.Columns.Payload, text, r.exp.limits); err != nil {
		return nil, nil, err
	}
	node, err := parseJSON(text)
	if err != nil {
		return nil, nil, fmt.Errorf("payload: %w", err)
	}
	// The transform's JsonSchemaData drops null fields whatever
	// routing.json_null_fields says, which is the router's own setting.
	x := expander{limits: r.exp.limits}
	key := r.cfg.Columns.Payload
	s, err := x.schemaOf(&key, node)
	if err != nil {
		return nil, nil, fmt.Errorf("payload: %w", err)
	}
	if s == nil {
		// An empty array: the transform leaves the field out.
		return optString, nil, nil
	}
	budget := x.limits.withDefaults().maxValueBytes
	v, err := x.data(node, s, &budget)
	if err != nil {
		return nil, nil, fmt.Errorf("payload: %w", err)
	}
	return s, v, nil
}
