// Package connector is outboxrelay's shared vocabulary: the outbox [Event],
// how an event becomes a Kafka [Message] ([Router]), the [Source] and [Sink]
// contracts, the [Runner] that joins a source to a sink, and the
// [Observer] it tells what it does.
//
// The runner's promise is the product's promise: a source is told that a
// batch is done only when Kafka has acknowledged every message of that batch
// and of every batch before it, so a source never advances (confirms an LSN,
// marks or deletes a row) past an event Kafka does not have. Delivery is
// at-least-once: after a crash or a failed produce, events after the last
// acknowledged checkpoint are read and published again, with the same `id`
// header, so consumers can drop the repeats.
package connector
