package config

import (
	"bytes"
	"os"
	"testing"
)

// TestConfigurationPage keeps the table of docs/configuration.md the one
// the code generates (and `outboxrelay config-reference` prints).
func TestConfigurationPage(t *testing.T) {
	const path = "../../../../docs/configuration.md"
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the configuration page: %v", err)
	}
	want, err := ReferencePage(page)
	if err != nil {
		t.Fatalf("docs/configuration.md: %v; put that line back above the table, then run `go generate ./cmd/outboxrelay/internal/config`", err)
	}
	if !bytes.Equal(page, want) {
		t.Errorf("docs/configuration.md's table is out of date or was edited by hand; regenerate it with `go generate ./cmd/outboxrelay/internal/config`. The table should read:\n%s", Reference())
	}
}
