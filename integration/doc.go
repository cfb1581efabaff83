// Package integration holds outboxrelay's end-to-end tests: a real
// PostgreSQL (a throwaway local cluster, or a container where a Docker
// daemon answers) and a real Kafka-protocol broker (kfake, in process),
// with the relay run in process or as the built binary.
//
// The behavioural suite (suite_test.go) runs against every source; each
// source says which capabilities it has.
//
// The server is PostgreSQL 15 unless OUTBOXRELAY_TEST_PG names another
// major (internal/localpg). scripts/test runs the whole package on 15, and
// the suite (the poller's half on 18 only) with the slot-loss, failover and
// dead-connection tests on 16, 17 and 18 as well; docs/operations.md
// ("PostgreSQL versions") lists them.
// A test that needs a newer server than the one running skips on it.
package integration
