// Command outboxrelay relays a PostgreSQL transactional outbox to Kafka.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxrelay/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/demo"
)

const usage = `outboxrelay relays a PostgreSQL transactional outbox to Kafka.

Usage:
  outboxrelay run --config FILE    relay until SIGTERM or SIGINT
  outboxrelay run --debezium-config FILE
                                   relay with a Debezium connector's configuration, as it is
  outboxrelay debezium translate FILE
                                   print a Debezium configuration as outboxrelay's YAML, with notes
  outboxrelay demo                 run it end to end on a throwaway PostgreSQL and in-process broker
  outboxrelay poll-ddl             print the SQL that readies the outbox table for source: poll
                                   (for the table and poll keys of --config FILE, if given)
  outboxrelay init --config FILE   print the SQL that sets up the database (table, publication, slot, role);
                                   --apply runs it (see outboxrelay init -h)
  outboxrelay check --config FILE  check PostgreSQL and Kafka for the configuration; exits non-zero on a failure
  outboxrelay config-dump --config FILE
                                   print the effective configuration, secrets hidden
  outboxrelay version              print the version, the commit it was built from and the Go version
  outboxrelay config-reference     print the configuration keys as a Markdown table

Every configuration key can also be set in the environment, e.g.
OUTBOXRELAY_POSTGRES_URL and OUTBOXRELAY_KAFKA_BROKERS (comma-separated).
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "outboxrelay:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A second signal, after stop has restored the default handling,
	// ends the process at once.
	context.AfterFunc(ctx, stop)

	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(stderr)
		path := fs.String("config", "", "configuration file (YAML); the environment overrides it")
		dbz := fs.String("debezium-config", "", "Debezium connector config (Kafka Connect JSON or .properties, Debezium Server application.properties); --config and the environment add to it")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		cfg, notes, err := loadRunConfig(*path, *dbz, os.Environ())
		if err != nil {
			return err
		}
		log := app.NewLogger(stderr, cfg.Log.Level, cfg.Log.Format)
		logDebeziumNotes(log, notes)
		return app.Run(ctx, cfg, log)
	case "demo":
		return demo.Run(ctx, stdout, stderr)
	case "debezium":
		return debeziumCmd(rest, stdout, stderr)
	case "poll-ddl":
		return pollDDL(rest, stdout, stderr)
	case "init":
		return initCmd(ctx, rest, stdout, stderr)
	case "check":
		return checkCmd(ctx, rest, stdout, stderr)
	case "config-dump":
		return configDump(rest, stdout, stderr)
	case "version":
		fmt.Fprint(stdout, app.Build())
		return nil
	case "config-reference":
		fmt.Fprint(stdout, config.Reference())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
