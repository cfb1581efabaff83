// Package bench measures outboxrelay end to end on one machine: a
// PostgreSQL server of its own (internal/localpg), an in-process
// Kafka-protocol broker (kfake) and the outboxrelay binary as a separate
// process, so that the relay's CPU time and peak memory are its own.
//
// One run reports, on the same backlog:
//
//   - the backlog drain: N committed events, then the relay started; events
//     per second until the broker holds the last one;
//   - the ceilings: pg_recvlogical decoding the same WAL with pgoutput to
//     /dev/null from a slot created at the same point, and a bare franz-go
//     producer with the sink's settings sending the same records; the drain
//     is reported as a ratio to each;
//   - steady-state latency: events committed at fixed rates, from each
//     COMMIT returning to the record being readable from the broker;
//   - footprint: the relay's peak RSS (VmHWM) and CPU seconds per million
//     events, from /proc.
//
// Timings are measured, never asserted: nothing here decides pass or fail
// on speed. The report states the machine, the versions and the settings
// the figures came from.
package bench
