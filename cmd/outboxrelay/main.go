// Command outboxrelay relays a PostgreSQL transactional outbox to Kafka.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxrelay/outboxrelay/internal/secret"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on stderr and maps it to the exit status: 0 for
// success and for help asked for, 2 for a mistake in the call (the usage
// has been printed), 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.As(err, new(loggedError)) {
		return 1
	}
	if errors.As(err, new(usageError)) {
		// It starts with the command's name already.
		fmt.Fprintln(stderr, err)
		return 2
	}
	// The last guard for an error that quotes a URL or a connection
	// string, password and all (secret.RedactError).
	fmt.Fprintln(stderr, "outboxrelay:", secret.RedactError(err))
	return 1
}

// loggedError is an error a command has already logged as its last
// ERROR record, in the configured log format, so that a log pipeline sees
// why the process stopped; main prints nothing more for it.
type loggedError struct{ err error }

func (e loggedError) Error() string { return e.err.Error() }
func (e loggedError) Unwrap() error { return e.err }

// logExit logs err, the reason the command stops, as its last ERROR
// record and returns it marked as logged; nil stays nil.
func logExit(log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	log.Error("outboxrelay stopped", "component", "app", "err", secret.RedactError(err).Error())
	return loggedError{err}
}

// run parses the command line and runs the command it names.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outboxrelay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	if err := parseFlags(fs, args, -1, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("outboxrelay: no command given")}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A second signal, after stop has restored the default handling,
	// ends the process at once.
	context.AfterFunc(ctx, stop)

	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "run":
		return runCmd(ctx, rest, stdout, stderr)
	case "backfill":
		return backfillCmd(ctx, rest, stdout, stderr)
	case "replay":
		return replayCmd(ctx, rest, stdout, stderr)
	case "dead-letters":
		return deadLettersCmd(ctx, rest, stdout, stderr)
	case "demo":
		return demoCmd(ctx, rest, stdout, stderr)
	case "debezium":
		return debeziumCmd(rest, stdout, stderr)
	case "poll-ddl":
		return pollDDL(rest, stdout, stderr)
	case "init":
		return initCmd(ctx, rest, stdout, stderr)
	case "check":
		return checkCmd(ctx, rest, stdout, stderr)
	case "status":
		return statusCmd(ctx, rest, stdout, stderr)
	case "config-dump":
		return configDump(rest, stdout, stderr)
	case "config-reference":
		return configReference(rest, stdout, stderr)
	case "version":
		return versionCmd(rest, stdout, stderr)
	case "help":
		// `outboxrelay help COMMAND` is `outboxrelay COMMAND -h`.
		if len(rest) > 0 && rest[0] != "help" {
			return run([]string{rest[0], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("outboxrelay: unknown command %q", cmd)}
	}
}
