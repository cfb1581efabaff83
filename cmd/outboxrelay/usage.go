package main

// usage is what `outboxrelay --help` prints: every command, the exit
// statuses, and the pages of docs/, so that a user who has only
// the binary learns where each command is explained.
const usage = `outboxrelay relays a PostgreSQL transactional outbox to Kafka.

Usage:
  outboxrelay COMMAND [flags]
  outboxrelay COMMAND -h           the usage of one command and the page of docs/ that explains it

Commands:
  run --config FILE                relay until SIGTERM or SIGINT
  run --debezium-config FILE       relay with a Debezium connector's configuration, as it is
  debezium translate FILE          print a Debezium configuration as outboxrelay's YAML, with notes
  debezium compatibility           print which of Debezium's options are honoured (Markdown)
  backfill --config FILE --after-checkpoint
                                   after a lost slot, publish the rows committed since the
                                   checkpoint again and leave the slot where the relay carries on
  replay --config FILE --since TIME
                                   beside the running relay, publish again the rows committed
                                   since TIME (or --id, --aggregate); --resume after a stop
  dead-letters --config FILE list | show ID | redrive
                                   list the dead-lettered events, or send them on through
                                   today's routing
  demo                             run it end to end on a throwaway PostgreSQL and in-process broker
  poll-ddl [--config FILE]         print the SQL that readies the outbox table for source: poll
  init --config FILE               print the SQL that sets up the database (table, publication, slot,
                                   role); --apply runs it
  check --config FILE              check PostgreSQL and Kafka for the configuration; exits 1 on a failure
  status --config FILE             where the relay stands: from the running relay, else from PostgreSQL
                                   and the checkpoint topic; exits 1 when it is not ready or not running
  config-dump --config FILE        print the effective configuration, secrets hidden
  config-reference                 print the configuration keys as a Markdown table
  version                          print the version, the commit it was built from and the Go version

Every configuration key can also be set in the environment, e.g.
OUTBOXRELAY_POSTGRES_URL and OUTBOXRELAY_KAFKA_BROKERS (comma-separated); an
OUTBOXRELAY_ variable that sets no key is an error.

Exit status: 0 on success (and for -h), 1 when the work failed, 2 for an unknown
command or flag.

Documentation, in docs/ of the source repository:
  docs/getting-started.md   from an empty database to records in a topic: demo, init, check, run
  docs/configuration.md     every key, its environment variable and default (run, config-dump,
                            config-reference)
  docs/debezium.md          migrating from Debezium, and the compatibility table (debezium,
                            run --debezium-config)
  docs/schema-registry.md   Avro, JSON Schema and Protobuf with a Schema Registry
  docs/operations.md        metrics, probes, logs, memory sizing, backfill, the heartbeat
  docs/database.md          readying PostgreSQL: versions, init, check, failover, poolers
  docs/security.md          TLS and SASL, secrets in files
  docs/status.md            the status page on http.listen and outboxrelay status, the JSON of /status
  docs/poller.md            source: poll (poll-ddl)
  docs/replay.md            publishing events again and redriving dead letters (replay,
                            dead-letters)
  docs/guarantees.md        ordering and delivery, and what each fault does
  docs/architecture.md      how an event travels to Kafka and its acknowledgement back
  docs/performance.md       throughput and latency, measured
`
