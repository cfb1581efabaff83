// Package sink publishes outbox messages to Kafka with franz-go.
//
// The producer is idempotent with acks=all, so a retried produce is written
// once and in order; records are partitioned by key with the murmur2 hash of
// the Java client's default partitioner, so an aggregate's events land on
// the same partition that a Java producer (and Debezium) would pick, in the
// order they were published. A record larger than the broker accepts is
// refused before it is produced with an error naming the event. The sink
// stops on suspected data loss instead of skipping ahead, so that the
// runner restarts from its last checkpoint.
package sink
