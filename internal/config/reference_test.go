package config

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeReference keeps the README's configuration table the one the
// code generates.
func TestReadmeReference(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatalf("read README: %v", err)
	}
	want := Reference()
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md's configuration table is out of date; replace it with the output of `go run ./cmd/outboxrelay config-reference`:\n%s", want)
	}
}
