package main

import (
	"fmt"
	"io"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

var versionUsage = commandUsage{
	text: `Usage: outboxrelay version

Prints the version (the release set at build time, else the module version
go build recorded, else dev), the commit the binary was built from and its
time ("modified" when the tree had uncommitted changes), and the Go version.
The first line, "outboxrelay VERSION", is the one outboxrelay_build_info
reports.
`,
	docs: "docs/operations.md",
}

// versionCmd is `outboxrelay version`.
func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay version", versionUsage)
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	_, err := fmt.Fprint(stdout, app.Build())
	return err
}

var configReferenceUsage = commandUsage{
	text: `Usage: outboxrelay config-reference

Prints every configuration key with its environment variable, default and
meaning, as a Markdown table.
`,
	docs: "docs/configuration.md",
}

// configReference is `outboxrelay config-reference`.
func configReference(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay config-reference", configReferenceUsage)
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	_, err := fmt.Fprint(stdout, config.Reference())
	return err
}
