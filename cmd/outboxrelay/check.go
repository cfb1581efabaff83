package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/config"
)

// errCheckFailed makes the process exit non-zero after a report with a
// failure; the report itself has said what failed.
var errCheckFailed = errors.New("check failed: see the FAIL lines and their fixes above")

// checkCmd connects with the configuration and prints what is and is not
// set up, with the fix for each problem.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML); the environment overrides it")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each connection attempt")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return fmt.Errorf("the configuration has problems; fix them first:\n%w", err)
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

// configDump prints the effective configuration, secrets hidden.
func configDump(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config-dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML); the environment overrides it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return err
	}
	b, err := cfg.Dump()
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
