// Package metrics observes a running relay for Prometheus and for the
// health probes, from outside the hot code.
//
// The runner tells [Metrics.Observer] what it does (a run of the source
// started or ended, a batch taken and handed to the sink, a dead letter
// acknowledged, a failed run restarted); [Metrics.Sink] decorates the [connector.Sink] to count and
// time each message from Publish to its acknowledgement. Neither adds a
// goroutine to an event's way. The Kafka client's own metrics come from
// franz-go's kprom hooks ([Metrics.KafkaHooks]); replication slot lag comes
// from a [PostgresProbe], which reads the server's catalog on its own
// connection when scraped. Numbers only a particular source knows (skipped
// changes, the confirmed LSN, the poller's backlog) are read through the
// small interfaces in source.go, when the source given to
// [Metrics.ExportSource] implements them.
//
// [Metrics.Status] and [PostgresProbe.Slot] give the same observations,
// with the last events, dead letters and failure kept in bounded rings,
// to the relay's status page.
//
// Every metric is registered on the registry given to [New], never on the
// global one, and is named outboxrelay_*.
package metrics
