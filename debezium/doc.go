// Package debezium makes outboxrelay a drop-in replacement for Debezium's
// PostgreSQL connector with the Outbox Event Router.
//
// It reads a Debezium configuration as users have it ([ParseFile]): a
// Kafka Connect connector JSON or .properties file, or a Debezium Server
// application.properties. [Translate] maps every option to outboxrelay's
// native configuration and says, in a [Note] naming the option, what it
// does with each one it does not simply map; none is ignored in silence,
// and [Translation.Err] reports the options it cannot honour.
//
// [Router] is the [connector.Router] that writes the records Debezium
// would: the router's topic, key, headers, envelope fields, partition and
// timestamp, with key, value and headers written as Kafka Connect's
// StringConverter, JsonConverter (schemas.enable true or false),
// ByteArrayConverter, Debezium's pass-through BinaryDataConverter
// (ByteBufferConverter), Confluent's AvroConverter and SimpleHeaderConverter
// write them. For Avro it derives the schema as Confluent's AvroData does
// (avro.go), registers it in a Schema Registry and writes the Confluent
// wire format (registry.go); a registry that does not answer holds
// routing, in order, until it does. It types each
// column as Debezium's connector does, from the outbox table's catalog,
// since the schemas JsonConverter writes depend on it; a [Catalog] beneath
// the router reads it, and Route does no other I/O than the catalog and
// registry reads, both bounded by the caller's context. Kafka Connect's
// transforms chained after the router ([Transform], [Predicate]) are
// applied to the record it makes before the converters write it, as a
// Connect worker applies them. [Options] lists
// every option that matters to a migration with its status; the compatibility
// table of docs/debezium.md is made from it.
package debezium
