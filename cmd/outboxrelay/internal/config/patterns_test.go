package config

import (
	"slices"
	"testing"
)

// TestTablePatternsOnly: with only outbox.table_patterns the relay has no
// default table (public.outbox): the patterns' matches are the tables.
func TestTablePatternsOnly(t *testing.T) {
	c, err := LoadTranslated([]byte("postgres:\n  url: postgres://u@h/db\nkafka:\n  brokers: [k:9092]\noutbox:\n  table_patterns: ['public\\.outbox.*']\nrouting:\n  value_format: json\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if names := c.Outbox.TableNames(); names != nil {
		t.Errorf("outbox tables %v, want none named", names)
	}
	cc := c.CDCConfig()
	if cc.Table != "" || cc.Tables != nil || !slices.Equal(cc.TablePatterns, []string{`public\.outbox.*`}) {
		t.Errorf("cdc config table %q, tables %v, patterns %v", cc.Table, cc.Tables, cc.TablePatterns)
	}
	if rc := c.DebeziumRouter(); rc == nil || !rc.TablePatterns || rc.Table != "" {
		t.Errorf("Debezium router config %+v, want table patterns and no table", rc)
	}
}
