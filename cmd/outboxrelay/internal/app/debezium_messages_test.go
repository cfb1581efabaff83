package app_test

import (
	"strings"
	"testing"
)

// messageConnectorJSON is connectorJSON with Debezium's
// DecodeLogicalDecodingMessageContent transform chained before the outbox
// router, relaying the messages of prefix outbox.
func messageConnectorJSON(options string) string {
	return strings.Replace(connectorJSON(`,
    "message.prefix.include.list": "outbox",
    "transforms.decode.type": "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"`+options),
		`"transforms": "outbox"`, `"transforms": "decode,outbox"`, 1)
}

// emitOrder writes the documentation's event as a logical decoding
// message, in the content format outboxrelay's writer uses.
func emitOrder(id, payload string) string {
	return `SELECT pg_logical_emit_message(true, 'outbox', '{"id": "` + id + `", "aggregatetype": "order", "aggregateid": "1", "type": "OrderCreated", "payload": ` + payload + `, "headers": {"tenant": "t1"}}')`
}

// Debezium's records for messages: the transform makes the content the
// after struct of an insert by JsonSchemaData, so the key and id are
// optional plain strings and an object payload is the struct inferred
// from it in the message's own key order (not jsonb's), named payload.
const (
	orderMsgSchema = `{"type":"struct","fields":[` +
		`{"type":"int32","optional":true,"field":"id"},` +
		`{"type":"int32","optional":true,"field":"customerId"},` +
		`{"type":"string","optional":true,"field":"orderDate"},` +
		`{"type":"array","items":{"type":"struct","fields":[` +
		`{"type":"int32","optional":true,"field":"id"},{"type":"string","optional":true,"field":"item"},` +
		`{"type":"string","optional":true,"field":"status"},{"type":"int32","optional":true,"field":"quantity"},` +
		`{"type":"double","optional":true,"field":"totalPrice"}],"optional":true,"name":"payload.lineItems"},"optional":true,"field":"lineItems"}],` +
		`"optional":true,"name":"payload"}`
	orderMsgCompact = `{"id":1,"customerId":123,"orderDate":"2019-01-31T12:13:01","lineItems":[{"id":1,"item":"Debezium in Action","status":"ENTERED","quantity":2,"totalPrice":39.98},{"id":2,"item":"Debezium for Dummies","status":"ENTERED","quantity":1,"totalPrice":29.99}]}`
)

var messageRecordCases = []recordCase{
	{
		name:   "messages, JsonConverter with schemas (the worker's default)",
		config: messageConnectorJSON(``),
		ddl:    outboxDDL,
		rows:   []string{emitOrder(id1, orderPayload)},
		want: []record{{topic: "outbox.event.order", partition: -1,
			key:     `{"schema":{"type":"string","optional":true},"payload":"1"}`,
			value:   `{"schema":` + orderMsgSchema + `,"payload":` + orderMsgCompact + `}`,
			headers: []header{{key: "id", value: id1}}}},
	},
	{
		name: "messages and rows in one transaction, StringConverter",
		config: messageConnectorJSON(`,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "transforms.outbox.table.fields.additional.placement": "type:header:eventType"`),
		ddl:  outboxDDL,
		rows: []string{`BEGIN`, insertOrder(id1), emitOrder(id2, `"a string payload"`), `COMMIT`},
		want: []record{
			{topic: "outbox.event.order", partition: -1, key: "1", value: orderJSONB,
				headers: []header{{key: "id", value: id1}, {key: "eventType", value: "OrderCreated"}}},
			{topic: "outbox.event.order", partition: -1, key: "1", value: "a string payload",
				headers: []header{{key: "id", value: id2}, {key: "eventType", value: "OrderCreated"}}},
		},
	},
	{
		// JsonConverter without schemas writes the struct as a JSON
		// object: the payload as written, where a jsonb row's payload
		// is a JSON string.
		name: "messages, JsonConverter without schemas",
		config: messageConnectorJSON(`,
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false"`),
		ddl:  outboxDDL,
		rows: []string{emitOrder(id1, orderPayload)},
		want: []record{{topic: "outbox.event.order", partition: -1, key: `"1"`, value: orderMsgCompact,
			headers: []header{{key: "id", value: id1}}}},
	},
}

// TestRecordsFromMessages: a Debezium configuration with
// message.prefix.include.list and the DecodeLogicalDecodingMessageContent
// transform before the outbox router gives Debezium's records for
// events written as logical decoding messages, beside the table's.
func TestRecordsFromMessages(t *testing.T) {
	for _, tc := range messageRecordCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runRecordCase(t, tc)
		})
	}
}
