// Package outbox writes transactional-outbox events for outboxrelay from
// the application's own transaction.
//
// [Writer.Write] inserts each event as a row of the outbox table (or, with
// [Messages], emits it as a logical decoding message) in the caller's
// transaction, a pgx.Tx or a *sql.Tx, beside the business rows it
// describes: the event is committed exactly when they are. The relay then
// publishes it to Kafka.
//
// By default the table is the one outboxrelay's documentation and its init
// command make, Debezium's five columns (id, aggregatetype, aggregateid,
// type, payload). A table with a headers column ([HeadersColumn]) also
// carries [Event.Headers] and the trace context of ctx, injected by
// OpenTelemetry's propagator (traceparent, tracestate), so that the
// relay's span and the consumer's continue the writer's trace; the relay
// publishes them as record headers when its routing.headers_column names
// the column. Each event gets a UUIDv7 id, so ids sort by creation time.
//
// The package is a module of its own, so an application that imports it
// pulls in pgx, OpenTelemetry's API and the UUID package, and none of the
// relay's dependencies. It is versioned apart from the relay, tagged
// outbox/vX.Y.Z; docs/application.md in the repository describes the
// table, the relay's configuration for it, the message format and which
// relay reads which.
package outbox
