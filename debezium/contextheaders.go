package debezium

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// The headers Debezium 3.2 and later put first on every record while
// extended.headers.enabled is true (its default): DebeziumHeaderProducer.
// contextHeaders (debezium-connector-common, connector/common/), added by
// EventDispatcher.getExtendedHeaders after the change event's own headers,
// which the outbox router keeps and adds its own after. Each is a string
// header (Schema.STRING_SCHEMA) that the header converter writes:
//   - connectorLogicalName: CdcSourceTaskContext.getConnectorLogicalName,
//     the connector's logical name, topic.prefix;
//   - taskId: the PostgreSQL connector's task context takes the
//     constructor without a task id, which passes "0";
//   - connectorName: getConnectorPluginName, PostgresConnectorConfig.
//     getConnectorName, Module.name(), "postgresql";
//   - runId (Debezium 3.4 and later): a UUID made once per task
//     start by UUIDUtils.generateNewUUID, a version 7 UUID.
const contextHeaderPrefix = "__debezium.context."

// contextHeaders are the four headers' values, in Debezium's order.
func contextHeaders(logicalName, runID string) []connector.Header {
	return []connector.Header{
		{Key: contextHeaderPrefix + "connectorLogicalName", Value: []byte(logicalName)},
		{Key: contextHeaderPrefix + "taskId", Value: []byte("0")},
		{Key: contextHeaderPrefix + "connectorName", Value: []byte("postgresql")},
		{Key: contextHeaderPrefix + "runId", Value: []byte(runID)},
	}
}

// newRunID is UUIDUtils.generateNewUUID: the epoch milliseconds in the
// top 48 bits, version 7, then random bits with the RFC 4122 variant.
func newRunID(now time.Time) string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	msb := uint64(now.UnixMilli())<<16 | binary.BigEndian.Uint64(r[:8])&0x0fff | 0x7000
	lsb := binary.BigEndian.Uint64(r[8:])&0x3fffffffffffffff | 0x8000000000000000
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], msb)
	binary.BigEndian.PutUint64(b[8:], lsb)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
