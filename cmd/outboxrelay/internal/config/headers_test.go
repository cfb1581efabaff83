package config

import (
	"strings"
	"testing"
)

// TestHeadersColumn: routing.headers_column reaches the runner's routing,
// from the file and from the environment, and is refused beside the
// Debezium keys, whose router would never read it.
func TestHeadersColumn(t *testing.T) {
	base := "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9092]\n"
	c, err := Load(writeFile(t, base+"routing:\n  headers_column: meta\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RunnerConfig().Routing.HeadersColumn; got != "meta" {
		t.Errorf("runner's headers column = %q, want meta", got)
	}
	c, err = Load(writeFile(t, base), []string{"OUTBOXRELAY_ROUTING_HEADERS_COLUMN=headers"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RunnerConfig().Routing.HeadersColumn; got != "headers" {
		t.Errorf("headers column from the environment = %q, want headers", got)
	}
	_, err = Load(writeFile(t, base+"routing:\n  headers_column: meta\n  value_format: json\n"), nil)
	if err == nil || !strings.Contains(err.Error(), `routing.headers_column "meta" is set with Debezium routing keys`) {
		t.Errorf("err = %v, want one refusing headers_column beside the Debezium keys", err)
	}
}
