package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/outboxrelay/outboxrelay/debezium"
	"github.com/outboxrelay/outboxrelay/internal/config"
)

const debeziumUsage = `Usage:
  outboxrelay debezium translate FILE
  outboxrelay debezium compatibility    print the compatibility table of Debezium's options (Markdown)

FILE is a Debezium PostgreSQL connector configuration: a Kafka Connect
connector JSON ({"name": ..., "config": {...}} or the config object alone),
a connector .properties file, or a Debezium Server application.properties.
translate prints the equivalent outboxrelay configuration (YAML) with a note
for every option that is not simply mapped, and exits non-zero when an
option cannot be honoured. The database password is left out; run
--debezium-config FILE uses the file as it is.
`

// debeziumCmd is `outboxrelay debezium ...`.
func debeziumCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && args[0] == "compatibility" {
		_, err := io.WriteString(stdout, debezium.CompatibilityTable())
		return err
	}
	if len(args) != 2 || args[0] != "translate" {
		fmt.Fprint(stderr, debeziumUsage)
		return errors.New("usage: outboxrelay debezium translate FILE")
	}
	t, err := translateFile(args[1], os.Environ())
	if err != nil {
		return err
	}
	out, err := t.YAML(false)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(out); err != nil {
		return err
	}
	if err := t.Err(); err != nil {
		return fmt.Errorf("%s cannot run as it is:\n%w", args[1], err)
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

// loadRunConfig loads the configuration of `run`: the native file, or the
// Debezium file translated with the native file (if any) on top; the
// environment overrides both.
func loadRunConfig(path, debeziumPath string, environ []string) (*config.Config, []debezium.Note, error) {
	if debeziumPath == "" {
		cfg, err := config.Load(path, environ)
		return cfg, nil, err
	}
	t, err := translateFile(debeziumPath, environ)
	if err != nil {
		return nil, nil, err
	}
	if err := t.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s cannot run as it is (outboxrelay debezium translate %s shows every note):\n%w", debeziumPath, debeziumPath, err)
	}
	translated, err := t.YAML(true)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.LoadTranslated(translated, path, environ)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", debeziumPath, err)
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
