// Package testenv gives tests the servers they run against: a PostgreSQL
// database of their own and a Kafka cluster, by default in-process (kfake).
// It is used only from tests, by integration/, cdc/, poller/ and sink/
// alike.
//
// Postgres returns a fresh, uniquely named database on a server shared by the
// whole test binary, started on first use and dropped again by t.Cleanup
// (with its replication slots, so a test can leave them behind). The server
// comes from, in order:
//
//   - OUTBOXRELAY_TEST_POSTGRES_URL: an existing server (wal_level=logical,
//     a role that may create databases); databases are created on it.
//   - Docker, if a daemon answers within 3 s and OUTBOXRELAY_TEST_DOCKER is
//     not "0": a postgres:15 container (postgres:MAJOR with
//     OUTBOXRELAY_TEST_PG set) started with testcontainers-go. This
//     path has not run in this project's CI, which has no Docker daemon; if
//     the container cannot be started the local server is used instead.
//   - internal/localpg: the PostgreSQL installed on this machine (the
//     project's scripts/test installs it when missing), or the major
//     OUTBOXRELAY_TEST_PG asks for (16, 17 and 18 fetched by
//     scripts/fetch-postgres). A test asking for a major the host lacks is
//     skipped with the reason.
//
// PostgresServer starts a dedicated local server instead, for tests that
// stop, crash or restart the database.
//
// Kafka starts a fresh kfake cluster per call, for a test that configures
// it, injects faults or uses topic names other tests use too; Consume
// reads records back. KafkaBroker gives a test that can share a broker
// (it names its topics with TopicPrefix and creates them with
// CreateTopics) the broker the environment names, else a kfake cluster:
//
//   - OUTBOXRELAY_TEST_KAFKA_BROKERS: an existing cluster, host:port
//     comma-separated, with OUTBOXRELAY_TEST_KAFKA_TLS_* and
//     OUTBOXRELAY_TEST_KAFKA_SASL_* for its security (named after the
//     relay's kafka.tls and kafka.sasl keys). internal/testenv/cmd/kfake
//     runs kfake in a process of its own for this.
//   - OUTBOXRELAY_TEST_KAFKA=kafka or redpanda: Apache Kafka 4 or Redpanda
//     in Docker (OUTBOXRELAY_TEST_KAFKA_IMAGE for another image), started
//     once per test binary with testcontainers-go. This path has not run
//     in this project's CI, which has no Docker daemon; without one the
//     tests that need a broker skip.
//
// With either set, Kafka skips its tests, and so does Broker.Kfake, which
// a test that injects faults calls for its cluster.
//
// StartRegistry starts a Schema Registry speaking the part of Confluent's
// REST API that franz-go's sr client uses, which a test can stop and start
// again on the same address, and make refuse a subject's new schemas.
//
// Packages that use testenv call Main from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Main runs the tests, then stops the shared server (removing its
// directory) and any cluster still open, and fails a passing run that leaked
// goroutines (go.uber.org/goleak). Without Main the shared server still dies
// with the test binary, but its temporary directory stays behind.
//
// Every helper takes a testing.TB and reports failures with t.Fatalf, so it
// must be called from the test's own goroutine.
package testenv
