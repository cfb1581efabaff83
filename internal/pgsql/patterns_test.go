package pgsql

import (
	"strings"
	"testing"
)

// TestTablePatterns matches as Debezium's table.include.list does: the
// whole schema.table (Pattern.matcher().matches()), ignoring case
// (Predicates.includes compiles with CASE_INSENSITIVE), never a system
// table (PostgresConnectorConfig.SystemTablesPredicate).
func TestTablePatterns(t *testing.T) {
	for _, tc := range []struct {
		name          string
		patterns      []string
		schema, table string
		want          bool
	}{
		{"prefix", []string{`public\.outbox.*`}, "public", "outbox_orders", true},
		{"whole name only", []string{`public\.outbox`}, "public", "outbox_orders", false},
		{"not a substring", []string{`outbox`}, "public", "outbox", false},
		{"schema and table", []string{`.*\.outbox`}, "sales", "outbox", true},
		{"case ignored", []string{`PUBLIC\.Outbox`}, "public", "outbox", true},
		{"an unescaped dot is any character", []string{`public.outbox`}, "public", "outbox", true},
		{"second pattern", []string{`a\.b`, `sales\..*`}, "sales", "events", true},
		{"alternation anchored as a whole", []string{`public\.a|public\.b`}, "public", "b", true},
		{"pg_catalog", []string{`.*`}, "pg_catalog", "pg_class", false},
		{"information_schema", []string{`.*`}, "information_schema", "tables", false},
		{"temporary schema", []string{`.*`}, "pg_temp_3", "outbox", false},
		{"spatial_ref_sys", []string{`.*`}, "public", "spatial_ref_sys", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := CompileTablePatterns("outbox.table_patterns", tc.patterns)
			if err != nil {
				t.Fatal(err)
			}
			if got := ps.Match(tc.schema, tc.table); got != tc.want {
				t.Errorf("%v match %s.%s: %t, want %t", tc.patterns, tc.schema, tc.table, got, tc.want)
			}
		})
	}
}

func TestTablePatternsRefused(t *testing.T) {
	_, err := CompileTablePatterns("outbox.table_patterns", []string{`public\.ok.*`, `public\.(?!x).*`})
	if err == nil || !strings.Contains(err.Error(), `outbox.table_patterns: "public\\.(?!x).*" is not a regular expression Go reads`) {
		t.Errorf("error %v, want one naming the key and the pattern", err)
	}
}
