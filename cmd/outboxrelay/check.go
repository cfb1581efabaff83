package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/config"
)

// errSeveralTables refuses outbox.tables in a command that takes one table.
func errSeveralTables(cmd string) error {
	return fmt.Errorf("%s takes one outbox table for now, and the configuration lists several (outbox.tables): run it once per table with OUTBOXRELAY_OUTBOX_TABLES=<schema.table> in the environment", cmd)
}

// errCheckFailed makes the process exit non-zero after a report with a
// failure; the report itself has said what failed.
var errCheckFailed = errors.New("check failed: see the FAIL lines and their fixes above")

var checkUsage = commandUsage{
	text: `Usage: outboxrelay check --config FILE [--json] [--timeout D]

Connects to PostgreSQL and Kafka as the relay would, changes nothing, and
prints a line for each thing the configuration needs (the connection, the
role's privileges, the table, publication, slot, brokers, topics), with the
fix under each problem. Exits 1 when any line fails.
`,
	docs: "docs/operations.md",
}

// checkCmd connects with the configuration and prints what is and is not
// set up, with the fix for each problem.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay check", checkUsage)
	path := fs.String("config", "", "configuration file (YAML); the environment overrides it")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each connection attempt")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return configProblems(err)
	}
	if len(cfg.Outbox.Tables) > 1 {
		return errSeveralTables("check")
	}
	report := check.Run(ctx, cfg, check.WithTimeout(*timeout))
	if *asJSON {
		err = report.WriteJSON(stdout)
	} else {
		fmt.Fprintf(stdout, "outboxrelay check: source %s, table %s, postgres %s, kafka %s\n\n",
			cfg.Source, cfg.Outbox.Table, config.RedactConnString(cfg.Postgres.URL), strings.Join(cfg.Kafka.Brokers, ","))
		err = report.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if report.Failed() {
		return errCheckFailed
	}
	return nil
}

var configDumpUsage = commandUsage{
	text: `Usage: outboxrelay config-dump --config FILE

Prints the effective configuration (the file, the environment over it, the
defaults) as YAML, with secrets hidden; a configuration with problems is
refused, every problem listed.
`,
	docs: "docs/operations.md; docs/configuration.md (every key)",
}

// configDump prints the effective configuration, secrets hidden.
func configDump(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay config-dump", configDumpUsage)
	path := fs.String("config", "", "configuration file (YAML); the environment overrides it")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return configProblems(err)
	}
	b, err := cfg.Dump()
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
