// Package integration holds outboxrelay's end-to-end tests: a real
// PostgreSQL (a throwaway local cluster, or a container where a Docker
// daemon answers) and a real Kafka-protocol broker (kfake, in process),
// with the relay run in process or as the built binary.
//
// The behavioural suite (suite_test.go) runs against every source; each
// source says which capabilities it has.
package integration
