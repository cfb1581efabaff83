package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestYAMLTypoNamesTheKey: a misspelt key in the file gets its full path
// and the key meant, as a misspelt environment variable does, not the Go
// type it was looked for in.
func TestYAMLTypoNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, says string
	}{
		{"a section's key", "kafka:\n  broker: [k:9092]\n", "line 2: kafka.broker is not a key; did you mean kafka.brokers?"},
		{"a nested section", "kafka:\n  tls:\n    ca_fil: x\n", "line 3: kafka.tls.ca_fil is not a key; did you mean kafka.tls.ca_file?"},
		{"an inlined struct's key", "kafka:\n  max_bufered_records: 5\n", "kafka.max_bufered_records is not a key; did you mean kafka.max_buffered_records?"},
		{"a top-level key", "sourc: poll\n", "line 1: sourc is not a key; did you mean source?"},
		{"a key spelt as its variable", "kafka_brokers: [k:9092]\n", "kafka_brokers is not a key; did you mean kafka.brokers, in its section?"},
		{"nothing near", "kafka:\n  zzzzzzzz: 1\n", "line 2: kafka.zzzzzzzz is not a key (`outboxrelay config-reference` lists every key)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Load: %v\nwant it to say %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "not found in type") {
				t.Errorf("the error still names a Go type: %v", err)
			}
		})
	}
}
