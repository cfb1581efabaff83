// Command gendoc writes the configuration reference table into the page
// named by its argument (docs/configuration.md), after the marker line
// config.ReferenceMarker, keeping the prose before it. Run it with
// `go generate ./cmd/outboxrelay/internal/config`.
package main

import (
	"fmt"
	"os"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc PAGE.md")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	page, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := config.ReferencePage(page)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}
