package main

import (
	"context"
	"io"
	"os"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/demo"
)

var runUsage = commandUsage{
	text: `Usage: outboxrelay run --config FILE
       outboxrelay run --debezium-config FILE [--config FILE]

Relays the outbox table to Kafka until SIGTERM or SIGINT, then stops
gracefully. The environment (OUTBOXRELAY_<SECTION>_<KEY>) overrides the
file; a configuration with problems is refused, every problem listed.
`,
	docs: "docs/configuration.md (every key); docs/debezium.md (--debezium-config)",
}

// runCmd is `outboxrelay run`: the relay itself.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay run", runUsage)
	cf := addConfigFlags(fs)
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, notes, err := cf.load(os.Environ())
	if err != nil {
		return configProblems(err)
	}
	log := app.NewLogger(stderr, cfg.Log.Level, cfg.Log.Format)
	logDebeziumNotes(log, notes)
	flags := cf.args()
	if err := app.LimitMemory(); err != nil {
		return logExit(log, err)
	}
	return logExit(log, app.Run(ctx, cfg, log, flags...))
}

var demoUsage = commandUsage{
	text: `Usage: outboxrelay demo

Runs outboxrelay end to end on this machine alone: a throwaway PostgreSQL
from the local server binaries, an in-process Kafka-protocol broker, a few
committed outbox events, the CDC relay, and the records it produced.
OUTBOXRELAY_TEST_PG=17 runs it on PostgreSQL 17 (16 and 18 likewise, once
scripts/fetch-postgres has fetched them; see docs/database.md#postgresql-versions).
`,
	docs: "docs/getting-started.md",
}

// demoCmd is `outboxrelay demo`.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay demo", demoUsage)
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	return demo.Run(ctx, stdout, stderr)
}
