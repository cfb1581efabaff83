package debezium

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/pgsql"
	"github.com/outboxrelay/outboxrelay/secret"
)

// pgCatalog is the [catalog] of a PostgreSQL database: each read opens a
// connection with the sources' network settings and closes it.
type pgCatalog struct {
	url     string
	network pgsql.Network
}

// table reads the catalog of name, schema.table.
func (p pgCatalog) table(ctx context.Context, name string) (*tableMeta, error) {
	schema, table, _ := strings.Cut(name, ".")
	return loadTable(ctx, p.url, p.network, schema, table)
}

// loadTable reads the outbox table's columns: type, NOT NULL and default.
// A missing table is permanent; a failed connection is not. network bounds
// the connection and the query, so that a PostgreSQL that does not answer
// fails the read instead of holding it.
func loadTable(ctx context.Context, url string, network pgsql.Network, schema, table string) (*tableMeta, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: postgres.url: %w", secret.RedactError(err))
	}
	network.Apply(&cfg.Config)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: connect within %s: %w", cfg.ConnectTimeout, secret.RedactError(err))
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	qctx, cancel := network.Query(ctx)
	defer cancel()
	rows, err := conn.Query(qctx, `
		SELECT a.attname, t.typname, a.atttypmod, a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: %w", err)
	}
	t := &tableMeta{schema: schema, table: table}
	for rows.Next() {
		c := &column{}
		if err := rows.Scan(&c.name, &c.typName, &c.typMod, &c.notNull, &c.defaultExpr); err != nil {
			return nil, fmt.Errorf("read the outbox table's column types: %w", err)
		}
		t.columns = append(t.columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: %w", err)
	}
	if len(t.columns) == 0 {
		return nil, connector.Permanent(fmt.Errorf("outbox table %s.%s does not exist, or the role cannot see it", schema, table))
	}
	return t, nil
}
