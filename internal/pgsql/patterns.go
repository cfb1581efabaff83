package pgsql

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TablePatterns are outbox.table_patterns compiled: regular expressions
// matched against a table's whole schema.table, ignoring case, as
// Debezium's table.include.list matches (Predicates.includes compiles
// each with Pattern.CASE_INSENSITIVE and asks for matches(), the whole
// string; PostgresConnectorConfig maps a table to schema.table).
type TablePatterns []*regexp.Regexp

// CompileTablePatterns compiles patterns, reporting the first that is not
// a valid RE2 expression under key.
func CompileTablePatterns(key string, patterns []string) (TablePatterns, error) {
	out := make(TablePatterns, 0, len(patterns))
	for _, p := range patterns {
		re, err := regexp.Compile(`(?i)\A(?:` + p + `)\z`)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a regular expression Go reads (RE2; no lookaround or backreferences): %w", key, p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// Match reports whether schema.table matches a pattern. System tables
// never do: Debezium's SystemTablesPredicate leaves out pg_catalog,
// information_schema, pg_temp* schemas and spatial_ref_sys (its
// table.ignore.builtin, on by default), and pg_toast holds no user rows.
func (ps TablePatterns) Match(schema, table string) bool {
	ls := strings.ToLower(schema)
	if ls == "pg_catalog" || ls == "information_schema" || strings.HasPrefix(schema, "pg_temp") ||
		strings.HasPrefix(ls, "pg_toast") || strings.EqualFold(table, "spatial_ref_sys") {
		return false
	}
	name := schema + "." + table
	for _, re := range ps {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// Lister is what MatchTables needs of a connection.
type Lister interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// MatchTables lists the tables the role can see that match ps, in
// schema.table order: ordinary and partitioned tables, but not a
// partition, whose rows its partitioned table's name carries
// (publish_via_partition_root).
func MatchTables(ctx context.Context, q Lister, ps TablePatterns) ([]TableName, error) {
	rows, err := q.Query(ctx, `
		SELECT n.nspname, c.relname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND has_schema_privilege(n.oid, 'USAGE')
		ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("list the tables outbox.table_patterns may match: %w", err)
	}
	var out []TableName
	var t TableName
	_, err = pgx.ForEachRow(rows, []any{&t.Schema, &t.Name}, func() error {
		if ps.Match(t.Schema, t.Name) {
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the tables outbox.table_patterns may match: %w", err)
	}
	return out, nil
}
