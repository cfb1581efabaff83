package debezium

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/pgsql"
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
	u, err := url.Parse(fmt.Sprint(v))
	if err != nil {
		return nil, fmt.Errorf("postgres.url: %w", err)
	}
	if t.password != "" {
		u.User = url.UserPassword(u.User.Username(), t.password)
	}
	if t.sslPassword != "" {
		q := u.Query()
		q.Set("sslpassword", t.sslPassword)
		u.RawQuery = q.Encode()
	}
	ps, err := pgsql.CompileTablePatterns("table.include.list", patterns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n pgsql.Network
	n.SetDefaults()
	conn, err := pgsql.Connect(ctx, u.String(), n, pgsql.ConnectTimeout(5*time.Second), pgsql.Param("application_name", "outboxrelay-translate"))
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
