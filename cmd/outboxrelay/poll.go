package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/outboxrelay/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/poller"
)

// pollDDL prints the SQL that readies the outbox table for source: poll,
// for the table, columns and poll settings of the configuration (or the
// defaults). It needs only those keys, not a connection or brokers.
func pollDDL(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("poll-ddl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML); the environment overrides it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Read(*path, os.Environ())
	if err != nil {
		return err
	}
	pc := cfg.PollConfig()
	pc.SetDefaults()
	if err := pc.ValidateTable(); err != nil {
		return err
	}
	fmt.Fprint(stdout, poller.DDL(pc))
	return nil
}
