// Package metrics observes a running relay for Prometheus and for the
// health probes, from outside the hot code.
//
// [Metrics.Sink] and [Metrics.Source] decorate a [connector.Sink] and a
// [connector.Source]: they count and time what passes through Publish and
// its acknowledgement callback, and through the batches a source hands on,
// without the runner, the sink or the sources knowing. The Kafka client's
// own metrics come from franz-go's kprom hooks ([Metrics.KafkaHooks]);
// replication slot lag comes from a [PostgresProbe], which reads the
// server's catalog on its own connection when scraped. Numbers only a
// particular source knows (skipped changes, the confirmed LSN, the
// poller's backlog) are read through the small interfaces in source.go,
// when the source implements them.
//
// Every metric is registered on the registry given to [New], never on the
// global one, and is named outboxrelay_*.
package metrics
