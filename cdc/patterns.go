package cdc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// outbox.table_patterns, Debezium's table.include.list as patterns: the
// tables that match are outbox tables. They are matched against the
// catalog at every start (resolvePatterns), and while the source streams
// a watch adds a matching table created later to the publication
// (watchTables), whose inserts then reach the stream, which adopts
// the table at its first relation message (adoptTable). A publication FOR
// ALL TABLES, as Debezium's all_tables makes, needs no adding: a new
// table is in it from its creation.
//
// A table the watch adds is published from the transaction after the
// ALTER PUBLICATION: rows committed in it before are not relayed, and the
// watch says so at ERROR with their count. Creating the table and adding
// it to the publication in one transaction, or a FOR ALL TABLES
// publication, leaves no such gap.

// tableWatchInterval is how often the watch looks for new tables.
const tableWatchInterval = 5 * time.Second

// resolvePatterns makes the tables the patterns match now outbox tables,
// besides the configured ones; a table matched at an earlier start and
// gone since drops out.
func (s *Source) resolvePatterns(ctx context.Context, conn *pgx.Conn) error {
	if len(s.patterns) == 0 {
		return nil
	}
	found, err := pgsql.MatchTables(ctx, conn, s.patterns)
	if err != nil {
		return classify("match outbox.table_patterns", err)
	}
	kept := slices.DeleteFunc(s.tables, func(t table) bool { return t.matched })
	var names []string
	for _, f := range found {
		if !slices.ContainsFunc(kept, func(t table) bool { return t.schema == f.Schema && t.name == f.Name }) {
			kept = append(kept, s.matchedTable(f.Schema, f.Name, 0))
		}
		names = append(names, f.Schema+"."+f.Name)
	}
	s.tables = kept
	if len(names) == 0 {
		s.log.Warn("outbox.table_patterns match no table yet; a matching table created later joins the publication and the stream",
			"patterns", strings.Join(s.cfg.TablePatterns, ", "), "publication", s.cfg.Publication)
		return nil
	}
	s.log.Info("outbox.table_patterns match these tables now; a matching table created later joins them",
		"patterns", strings.Join(s.cfg.TablePatterns, ", "), "tables", strings.Join(names, ", "))
	return nil
}

func (s *Source) matchedTable(schema, name string, oid uint32) table {
	return table{schema: schema, name: name, qualified: schema + "." + name, columns: s.cfg.Columns, oid: oid, matched: true}
}

// tableList is the outbox tables, for logs.
func (s *Source) tableList() string {
	names := make([]string, len(s.tables))
	for i, t := range s.tables {
		names[i] = t.qualified
	}
	return strings.Join(names, ", ")
}

// adoptTable makes a table the stream announces an outbox table when it
// matches the patterns and is not one yet: created, and published, while
// the source streams. Called on the stream's goroutine, the only one that
// touches s.tables while it runs.
func (s *Source) adoptTable(m *pglogrepl.RelationMessage) {
	if len(s.patterns) == 0 {
		return
	}
	for _, t := range s.tables {
		if t.oid == m.RelationID || (t.schema == m.Namespace && t.name == m.RelationName) {
			return
		}
	}
	if !s.patterns.Match(m.Namespace, m.RelationName) {
		return
	}
	t := s.matchedTable(m.Namespace, m.RelationName, m.RelationID)
	s.tables = append(s.tables, t)
	s.log.Info("relaying a new table that matches outbox.table_patterns", "table", t.qualified,
		"patterns", strings.Join(s.cfg.TablePatterns, ", "))
}

// watchTables looks for matching tables the publication lacks every
// tableWatchInterval, on a connection of its own, and adds them when
// cdc.create_publication allows; otherwise it says, once a table, what to
// run. A failed look is logged and tried again: it delays a new table, it
// does not stop what the source relays.
func (s *Source) watchTables(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			pgsql.Close(ctx, conn)
		}
	}()
	t := time.NewTicker(tableWatchInterval)
	defer t.Stop()
	told := map[string]bool{} // tables the ERROR about was logged for; bounded by the catalog
	var fails failureLog
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		conn, err = s.watchOnce(ctx, conn, told)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if fails.failed(err) {
				s.log.Warn("could not look for new tables matching outbox.table_patterns; trying again", "err", err, "every", tableWatchInterval.String())
			}
		} else if fails.recovered() {
			s.log.Info("looking for new tables matching outbox.table_patterns works again")
		}
	}
}

// watchOnce adds the matching tables the publication lacks. It returns
// the connection to use next time, nil after an error.
func (s *Source) watchOnce(ctx context.Context, conn *pgx.Conn, told map[string]bool) (*pgx.Conn, error) {
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	if conn == nil {
		var err error
		if conn, err = pgsql.Connect(qctx, s.cfg.URL, s.cfg.Network, pgsql.Param("application_name", "outboxrelay-tables")); err != nil {
			return nil, classify("connect to look for new tables", err)
		}
	}
	fail := func(what string, err error) (*pgx.Conn, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, classify(what, err)
	}
	found, err := pgsql.MatchTables(qctx, conn, s.patterns)
	if err != nil {
		return fail("match outbox.table_patterns", err)
	}
	rows, err := conn.Query(qctx, `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1`, s.cfg.Publication)
	if err != nil {
		return fail("read the publication's tables", err)
	}
	published, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fail("read the publication's tables", err)
	}
	for _, f := range found {
		name := f.Schema + "." + f.Name
		if slices.Contains(published, name) {
			continue
		}
		t := s.matchedTable(f.Schema, f.Name, 0)
		sql := pgsql.AddTableSQL(s.cfg.Publication, t.ident())
		if !*s.cfg.CreatePublication {
			if !told[name] {
				told[name] = true
				s.log.Error("a table matches outbox.table_patterns but is not in the publication, and cdc.create_publication is false: its events are not relayed until it is added",
					"table", name, "publication", s.cfg.Publication, "fix", sql)
			}
			continue
		}
		if _, err := conn.Exec(qctx, sql); err != nil && !isDuplicate(err) {
			if !told[name] {
				told[name] = true
				s.log.Error("could not add a table that matches outbox.table_patterns to the publication: its events are not relayed until it is added",
					"table", name, "publication", s.cfg.Publication, "err", classify("add the table", err), "fix", "as the table's owner: "+sql)
			}
			continue
		}
		s.log.Info("added a new table that matches outbox.table_patterns to the publication; its inserts are relayed from now on",
			"table", name, "publication", s.cfg.Publication)
		s.errorRowsBefore(qctx, conn, t)
	}
	return conn, nil
}

// errorRowsBefore says at ERROR how many rows a table held when the watch
// added it to the publication: committed before, they are not in the
// stream.
func (s *Source) errorRowsBefore(ctx context.Context, conn *pgx.Conn, t table) {
	const most = 100000
	var n int64
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d) t`, t.ident(), most+1)).Scan(&n); err != nil || n == 0 {
		return
	}
	count := fmt.Sprint(n)
	if n > most {
		count = fmt.Sprintf("more than %d", most)
	}
	s.log.Error("the new table held rows before it joined the publication; those are not relayed",
		"table", t.qualified, "rows", count,
		"hint", "publish them once with outboxrelay backfill --all; to leave no gap, add a new outbox table to the publication in the transaction that creates it, or use a publication FOR ALL TABLES")
}
