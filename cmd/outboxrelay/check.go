package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// errCheckFailed makes the process exit non-zero after a report with a
// failure; the report itself has said what failed.
var errCheckFailed = errors.New("check failed: see the FAIL lines and their fixes above")

var checkUsage = commandUsage{
	text: `Usage: outboxrelay check --config FILE [--json] [--timeout D]
       outboxrelay check --debezium-config FILE [--config FILE] [--json] [--timeout D]

Connects to PostgreSQL and Kafka as the relay would, changes nothing, and
prints a line for each thing the configuration needs (the connection, the
role's privileges, the table, publication, slot, brokers, topics), with the
fix under each problem. Exits 1 when any line fails.
`,
	docs: "docs/database.md#checking-a-setup-outboxrelay-check",
}

// checkCmd connects with the configuration and prints what is and is not
// set up, with the fix for each problem.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay check", checkUsage)
	cf := addConfigFlags(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each connection attempt")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, notes, err := cf.load(os.Environ())
	if err != nil {
		return configProblems(err)
	}
	// What the translation said of each option not simply mapped, on
	// stderr so that the report (and its JSON) stays as it is.
	for _, n := range notes {
		fmt.Fprintf(stderr, "outboxrelay check: Debezium option %s\n", n)
	}
	// With several outbox tables (outbox.tables), a report per table,
	// one after the other (with --json, one JSON object each).
	failed := false
	if len(cfg.Outbox.TableNames()) == 0 {
		// Patterns alone: what they match changes as tables come and go.
		return fmt.Errorf("outboxrelay check: outbox.table_patterns name no table; check works on tables named in outbox.table or outbox.tables: name the ones to check (outboxrelay debezium translate lists what a Debezium pattern matches now)")
	}
	for i, name := range cfg.Outbox.TableNames() {
		one := *cfg
		one.Outbox.Table, one.Outbox.Tables, one.Outbox.Columns = name, nil, cfg.ColumnsOf(name)
		report := check.Run(ctx, &one, check.WithTimeout(*timeout))
		if *asJSON {
			err = report.WriteJSON(stdout)
		} else {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "outboxrelay check: source %s, table %s, postgres %s, kafka %s\n\n",
				one.Source, name, secret.Redact(one.Postgres.URL), strings.Join(one.Kafka.Brokers, ","))
			err = report.WriteTable(stdout)
		}
		if err != nil {
			return err
		}
		failed = failed || report.Failed()
	}
	if failed {
		return errCheckFailed
	}
	return nil
}

var configDumpUsage = commandUsage{
	text: `Usage: outboxrelay config-dump --config FILE
       outboxrelay config-dump --debezium-config FILE [--config FILE]

Prints the effective configuration (the file, the environment over it, the
defaults) as YAML, with secrets hidden; a configuration with problems is
refused, every problem listed. The Debezium routing keys and schema_registry
are shown as set, without their defaults (docs/configuration.md has them).
The last line is the memory to allow the relay at these settings
(docs/operations.md#memory-sizing).
`,
	docs: "docs/operations.md; docs/configuration.md (every key)",
}

// configDump prints the effective configuration, secrets hidden.
func configDump(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay config-dump", configDumpUsage)
	cf := addConfigFlags(fs)
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, _, err := cf.load(os.Environ())
	if err != nil {
		return configProblems(err)
	}
	b, err := cfg.Dump()
	if err != nil {
		return err
	}
	if _, err := stdout.Write(b); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "# memory to allow (docs/operations.md#memory-sizing): %s\n", cfg.Memory())
	return err
}
