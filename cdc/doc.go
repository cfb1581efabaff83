// Package cdc is the logical replication source: it streams committed
// inserts into the outbox table from a replication slot with the pgoutput
// plugin and hands them to the runner transaction by transaction, in commit
// order.
//
// It confirms to PostgreSQL (write, flush and apply positions of the standby
// status update) the end LSN of the last transaction whose events Kafka has
// acknowledged, together with every transaction before it, and nothing
// further, so a restart, a crash or a failed produce resumes where Kafka's
// copy ends: events can be delivered twice, never lost. While nothing is in
// flight it confirms the server's position from keepalives, so an idle outbox
// table does not hold back WAL.
//
// It uses pgoutput protocol version 1, in which PostgreSQL sends a
// transaction only after it commits, spilling large ones to its own disk
// (logical_decoding_work_mem); the source passes a large transaction on in
// bounded chunks and confirms nothing until its commit is acknowledged.
// UPDATE, DELETE and TRUNCATE on the outbox table are counted, logged and
// skipped. One goroutine owns the replication connection.
package cdc
