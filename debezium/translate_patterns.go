package debezium

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// TablePatterns are the table.include.list patterns the translation wrote
// as outbox.table_patterns; nil when it named every table.
func (t *Translation) TablePatterns() []string {
	v, _ := t.Setting("outbox.table_patterns")
	ps, _ := v.([]string)
	return ps
}

// MatchTables adds a note saying which tables the patterns match now, read
// from the catalog of the translated postgres.url (with the password), or
// why that could not be read. The relay matches them again at every start
// and while it runs; the note is what an operator checks a pattern by.
func (t *Translation) MatchTables(ctx context.Context) {
	patterns := t.TablePatterns()
	if len(patterns) == 0 {
		return
	}
	tables, err := t.matchTables(ctx, patterns)
	switch {
	case err != nil:
		t.Notes = append(t.Notes, Note{Option: "table.include.list", Severity: Info,
			Text: fmt.Sprintf("the tables %s match now are not known: %v", strings.Join(patterns, ", "), err)})
	case len(tables) == 0:
		t.Notes = append(t.Notes, Note{Option: "table.include.list", Severity: Info,
			Text: fmt.Sprintf("%s match no table now; a matching table created later joins while the relay runs", strings.Join(patterns, ", "))})
	default:
		t.Notes = append(t.Notes, Note{Option: "table.include.list", Severity: Info,
			Text: fmt.Sprintf("%s match these tables now: %s", strings.Join(patterns, ", "), strings.Join(tables, ", "))})
	}
}

func (t *Translation) matchTables(ctx context.Context, patterns []string) ([]string, error) {
	v, ok := t.Setting("postgres.url")
	if !ok {
		return nil, fmt.Errorf("no postgres.url (database.hostname and database.dbname are not set)")
	}
	u, err := t.withSecrets(fmt.Sprint(v))
	if err != nil {
		return nil, fmt.Errorf("postgres.url: %w", err)
	}
	ps, err := pgsql.CompileTablePatterns("table.include.list", patterns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n pgsql.Network
	n.SetDefaults()
	conn, err := pgsql.Connect(ctx, u, n, pgsql.ConnectTimeout(5*time.Second), pgsql.Param("application_name", "outboxrelay-translate"))
	if err != nil {
		return nil, pgsql.Classify("connect to PostgreSQL", err, nil)
	}
	defer pgsql.Close(ctx, conn)
	found, err := pgsql.MatchTables(ctx, conn, ps)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(found))
	for i, f := range found {
		names[i] = f.Schema + "." + f.Name
	}
	return names, nil
}

// tables reads the outbox tables from table.include.list: those named
// literally, schema.table, and the patterns, which the relay matches
// against the catalog (outbox.table_patterns). Debezium takes every entry
// as a regular expression matched against the whole schema.table,
// ignoring case (Predicates.includes, PostgresConnectorConfig's
// schema.table mapper), split at commas not escaped as \,
// (Strings.RegExSplitter); a literal name matches only itself, but for
// case.
func (tr *translator) tables() (tables, patterns []string) {
	key := "table.include.list"
	list, ok := tr.get(key)
	if !ok {
		key = "table.whitelist"
		list, ok = tr.get(key)
	}
	if _, excl := tr.conn.Get("table.exclude.list"); excl && ok {
		tr.used["table.exclude.list"] = true
		// ConnectorConfigValidationHelper.validateExcludeField.
		tr.note("table.exclude.list", Unsupported, "set together with %s, which Debezium refuses: keep one", key)
	}
	if !ok {
		tr.note("table.include.list", Warning, "not set: Debezium would capture every table; outboxrelay relays public.outbox (set outbox.table to change it)")
		return []string{"public.outbox"}, nil
	}
	for _, t := range splitRegexList(list) {
		// A literal name: a dot may be written as . or \.
		name := strings.ReplaceAll(t, `\.`, ".")
		if literalTable.MatchString(name) {
			if !strings.Contains(name, ".") {
				name = "public." + name
			}
			tables = append(tables, name)
			continue
		}
		if _, err := pgsql.CompileTablePatterns(key, []string{t}); err != nil {
			tr.note(key, Unsupported, "%v", err)
			continue
		}
		patterns = append(patterns, t)
	}
	if len(tables) == 0 && len(patterns) == 0 {
		tr.note(key, Unsupported, "names no table")
		return []string{"public.outbox"}, nil
	}
	if len(patterns) > 0 {
		tr.note(key, Info, "outbox.table_patterns %s: matched against the catalog at every start; while the relay runs, a matching table created later joins the publication and the stream (rows it held before joining are reported, not relayed, unless the publication is FOR ALL TABLES)", strings.Join(patterns, ", "))
		tr.schemaFilters(patterns)
	}
	return tables, patterns
}

// splitRegexList splits a Debezium list of regular expressions as
// Strings.RegExSplitter does: at commas, but not at an escaped \, which
// becomes a comma; parts trimmed, empty ones dropped.
func splitRegexList(list string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '\\':
			i++
		case ',':
			parts = append(parts, list[start:i])
			start = i + 1
		}
	}
	parts = append(parts, list[start:])
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(strings.ReplaceAll(p, `\,`, ",")); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// schemaFilters checks schema.include.list and schema.exclude.list against
// table patterns. Debezium captures a table only when its schema passes
// them too (Selectors' buildStartingFromSchemaFilter); outboxrelay
// matches the table patterns alone, which is the same when every pattern
// writes its schema out (inventory\.outbox.*) and the filters pass that
// schema.
func (tr *translator) schemaFilters(patterns []string) {
	for _, key := range []string{"schema.include.list", "schema.exclude.list"} {
		list, ok := tr.get(key)
		if !ok || strings.TrimSpace(list) == "" {
			continue
		}
		filter, err := pgsql.CompileTablePatterns(key, splitRegexList(list))
		if err != nil {
			tr.note(key, Unsupported, "%v", err)
			continue
		}
		var differ []string
		for _, p := range patterns {
			schema, ok := literalSchema(p)
			matched := ok && slices.ContainsFunc(filter, func(re *regexp.Regexp) bool { return re.MatchString(schema) })
			if !ok || matched != (key == "schema.include.list") {
				differ = append(differ, p)
			}
		}
		if len(differ) > 0 {
			tr.note(key, Unsupported, "Debezium applies it to the tables table.include.list matches, and outboxrelay does not: write the schema into each pattern (schema\\.pattern) so that it says which tables, for %s", strings.Join(differ, ", "))
			continue
		}
		tr.note(key, Info, "every table.include.list pattern names a schema it lets through, so it selects nothing more")
	}
}

// literalSchema is the schema a table pattern writes out before its first
// \. when that is a plain name.
func literalSchema(pattern string) (string, bool) {
	schema, _, ok := strings.Cut(pattern, `\.`)
	if !ok || !plainName.MatchString(schema) {
		return "", false
	}
	return schema, true
}

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var literalTable = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$`)

func (tr *translator) millis(option, v string) (string, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		tr.note(option, Unsupported, "%q is not a positive number of milliseconds", v)
		return "", false
	}
	return (time.Duration(n) * time.Millisecond).String(), true
}

// leftovers notes every option no mapping used.
func (tr *translator) leftovers() {
	for _, k := range tr.conn.Keys() {
		if tr.used[k] {
			continue
		}
		if rest, ok := strings.CutPrefix(k, tr.routerPfx); ok && tr.routerPfx != "" {
			if o, ok := lookup(ScopeRouter, rest); ok {
				tr.note(k, o.Report, "%s", o.Text)
			} else {
				tr.note(k, Warning, "unknown outbox router option; ignored")
			}
			continue
		}
		if o, ok := lookup(ScopeConnector, k); ok {
			tr.note(k, o.Report, "%s", o.Text)
			continue
		}
		if o, ok := lookup(ScopeConnect, k); ok {
			tr.note(k, o.Report, "%s", o.Text)
			continue
		}
		switch {
		case strings.HasPrefix(k, "transforms.") || strings.HasPrefix(k, "predicates"):
			tr.note(k, Info, "belongs to no transform in use; ignored, as Kafka Connect does")
		case strings.HasPrefix(k, "database.") || strings.HasPrefix(k, "driver."):
			tr.note(k, Info, "JDBC connection setting; not used")
		case strings.HasPrefix(k, "snapshot.") || strings.HasPrefix(k, "offset.") || strings.HasPrefix(k, "schema.history.") ||
			strings.HasPrefix(k, "errors.") || strings.HasPrefix(k, "slot.") || k == "config.action.reload" ||
			k == "exactly.once.support" || k == "transaction.boundary" || k == "offsets.storage.topic":
			tr.note(k, Info, "no effect on records")
		default:
			tr.note(k, Warning, "unknown option; ignored (check that it does not shape records)")
		}
	}
}
