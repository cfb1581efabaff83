package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/poller"
)

var pollDDLUsage = commandUsage{
	text: `Usage: outboxrelay poll-ddl [--config FILE]

Prints the SQL that readies the outbox table for source: poll (the poller's
columns, its index, the dead-letter table and the notify trigger), for the
table and poll keys of the configuration, or the defaults. It needs no
connection.
`,
	docs: "docs/poller.md",
}

// pollDDL prints the SQL that readies the outbox table for source: poll,
// for the table, columns and poll settings of the configuration (or the
// defaults). It needs only those keys, not a connection or brokers.
func pollDDL(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay poll-ddl", pollDDLUsage)
	path := fs.String("config", "", "configuration file (YAML); the environment overrides it; only the outbox and poll keys are used")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	cfg, err := config.Read(*path, os.Environ())
	if err != nil {
		return err
	}
	// Every table is checked before anything is printed: a user pipes the
	// output into psql, and half a script is worse than none.
	pcs := cfg.PollConfigs()
	var errs []error
	seen := map[string]bool{} // the tables share their columns and settings
	for i := range pcs {
		pcs[i].SetDefaults()
		if err := pcs[i].ValidateTable(); err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, pc := range pcs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprint(stdout, poller.DDL(pc))
	}
	return nil
}
