package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
)

var debeziumUsage = commandUsage{
	text: `Usage: outboxrelay debezium translate FILE
       outboxrelay debezium compatibility

translate prints a Debezium PostgreSQL connector configuration as
outboxrelay's YAML, with a note for every option that is not simply mapped.
compatibility prints which of Debezium's options outboxrelay honours, and
how, as a Markdown table.
`,
	docs: "docs/debezium.md",
}

var translateUsage = commandUsage{
	text: `Usage: outboxrelay debezium translate FILE

FILE is a Debezium PostgreSQL connector configuration: a Kafka Connect
connector JSON ({"name": ..., "config": {...}} or the config object alone),
a connector .properties file, or a Debezium Server application.properties.
Prints the equivalent outboxrelay configuration (YAML) with a note for every
option that is not simply mapped, and exits 1 when an option cannot be
honoured. Kafka Connect's transforms after the outbox router appear as
routing.transforms and routing.predicates, and a note names the chain.
The database password is left out; run --debezium-config FILE
uses the file as it is.
`,
	docs: "docs/debezium.md",
}

var compatibilityUsage = commandUsage{
	text: `Usage: outboxrelay debezium compatibility

Prints the compatibility table of Debezium's options (Markdown): for each,
its default, whether outboxrelay honours it, and the key that does.
`,
	docs: "docs/debezium.md",
}

// debeziumCmd is `outboxrelay debezium ...`.
func debeziumCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay debezium", debeziumUsage)
	if err := parseFlags(fs, args, -1, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		printUsage(fs, stderr)
		return usageError{errors.New("outboxrelay debezium: no command given; want translate or compatibility")}
	}
	switch sub, rest := fs.Arg(0), fs.Args()[1:]; sub {
	case "translate":
		return translateCmd(rest, stdout, stderr)
	case "compatibility":
		fs := newFlagSet("outboxrelay debezium compatibility", compatibilityUsage)
		if err := parseFlags(fs, rest, 0, stdout, stderr); err != nil {
			return err
		}
		_, err := io.WriteString(stdout, debezium.CompatibilityTable())
		return err
	default:
		printUsage(fs, stderr)
		return usageError{fmt.Errorf("outboxrelay debezium: unknown command %q; want translate or compatibility", sub)}
	}
}

// translateCmd is `outboxrelay debezium translate FILE`.
func translateCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay debezium translate", translateUsage)
	if err := parseFlags(fs, args, 1, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		printUsage(fs, stderr)
		return usageError{errors.New("outboxrelay debezium translate: FILE is missing")}
	}
	path := fs.Arg(0)
	t, err := translateFile(path, os.Environ())
	if err != nil {
		return err
	}
	// Table patterns: say what they match now, when the database answers.
	t.MatchTables(context.Background())
	out, err := t.YAML(false)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(out); err != nil {
		return err
	}
	if err := t.Err(); err != nil {
		return fmt.Errorf("%s cannot run as it is:\n%w", path, err)
	}
	return nil
}

// translateFile reads and translates a Debezium configuration file,
// resolving config providers from environ and the file system.
func translateFile(path string, environ []string) (*debezium.Translation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read Debezium config: %w", err)
	}
	f, err := debezium.ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("Debezium config %s: %w", path, err)
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return debezium.Translate(f, debezium.Env{
		Getenv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		ReadFile: os.ReadFile,
	}), nil
}

// configFlags are how every command that reads the configuration takes
// it: a file (--config), a Debezium connector's configuration under it
// (--debezium-config), the environment over both.
type configFlags struct {
	path, debezium *string
}

// addConfigFlags defines --config and --debezium-config on fs.
func addConfigFlags(fs *flag.FlagSet) configFlags {
	return configFlags{
		path:     fs.String("config", "", "configuration file (YAML); the environment overrides it"),
		debezium: fs.String("debezium-config", "", "Debezium connector config (Kafka Connect JSON or .properties, Debezium Server application.properties); --config and the environment add to it"),
	}
}

// args are the flags as given, for a command line printed for the user.
func (f configFlags) args() []string {
	var args []string
	if *f.debezium != "" {
		args = append(args, "--debezium-config", *f.debezium)
	}
	if *f.path != "" {
		args = append(args, "--config", *f.path)
	}
	return args
}

// load loads and validates the configuration the flags name, with the
// notes of its Debezium translation, if any.
func (f configFlags) load(environ []string) (*config.Config, []debezium.Note, error) {
	return f.read(environ, true)
}

// read is load, validating only when validate is set: for commands that
// use part of the configuration (init).
func (f configFlags) read(environ []string, validate bool) (*config.Config, []debezium.Note, error) {
	if *f.debezium == "" {
		if validate {
			cfg, err := config.Load(*f.path, environ)
			return cfg, nil, err
		}
		cfg, err := config.Read(*f.path, environ)
		return cfg, nil, err
	}
	t, err := translateFile(*f.debezium, environ)
	if err != nil {
		return nil, nil, err
	}
	if err := t.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s cannot run as it is (outboxrelay debezium translate %s shows every note):\n%w", *f.debezium, *f.debezium, err)
	}
	translated, err := t.YAML(true)
	if err != nil {
		return nil, nil, err
	}
	load := config.LoadTranslated
	if !validate {
		load = config.ReadTranslated
	}
	cfg, err := load(translated, *f.path, environ)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", *f.debezium, err)
	}
	return cfg, t.Notes, nil
}

// logDebeziumNotes logs what the translation said about each option that
// is not simply mapped, so none is ignored in silence.
func logDebeziumNotes(log *slog.Logger, notes []debezium.Note) {
	for _, n := range notes {
		level := slog.LevelInfo
		if n.Severity != debezium.Info {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "Debezium option: "+n.Text, "component", "debezium", "option", n.Option)
	}
}
