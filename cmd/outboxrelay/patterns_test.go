package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitCheckTablePatternsOnly: init and check work on named tables;
// with only outbox.table_patterns they say so and fail, rather than print
// nothing and succeed.
func TestInitCheckTablePatternsOnly(t *testing.T) {
	bin := plain.binary(t)
	path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
	cfg := "postgres:\n  url: postgres://relay@db:5432/app\nkafka:\n  brokers: [kafka:9092]\noutbox:\n  table_patterns: ['public\\.outbox.*']\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"init", "check"} {
		r := execute(t, bin, cmd, "--config", path)
		if r.code == 0 || !strings.Contains(r.stderr, "outbox.table_patterns name no table; "+cmd+" works on tables named in outbox.table or outbox.tables") {
			t.Errorf("%s with only table patterns: %s", cmd, r)
		}
	}
}
