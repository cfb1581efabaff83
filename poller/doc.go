// Package poller is the polling source, for databases where logical
// replication is not available: it claims committed outbox rows with
// ordinary queries, hands them to the runner, and once Kafka has them marks
// them published (or deletes them), in the transaction that claimed them.
//
// What it promises:
//
//   - No row is lost. A claim commits its mark only after Kafka has
//     acknowledged the batch; a crash, a lost connection or a failed produce
//     before that rolls the claim back and the rows are claimed again
//     (at least once, never lost).
//   - No row is skipped. Rows are chosen by state (unpublished), never by
//     position, so a row whose transaction commits after later rows were
//     published is still claimed.
//   - Order per aggregate, with any number of instances. Aggregates are
//     hashed into buckets; a claim takes transaction-scoped advisory locks
//     on a share of the buckets with waiting rows and claims only rows of
//     those buckets, oldest first by the ordering column. While one claim
//     has an aggregate's events in flight, no other claim can take a later
//     one: it cannot hold the bucket.
//   - Poison rows do not block the table. A row Kafka can never take (a
//     topic name it refuses, a record too large) is counted on the row,
//     retried alone, and after poll.max_attempts moved with the reason to a
//     dead-letter table, logged with its id.
//
// It wakes on LISTEN/NOTIFY when the table has the trigger that
// [DDL] prints, and otherwise polls, backing off while idle. In mark mode
// a retention job deletes old published rows. [DDL] prints the schema it
// needs on top of a Debezium-style outbox table.
package poller
