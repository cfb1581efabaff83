package debezium

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// PostgresCatalog is the [Catalog] of the PostgreSQL database at url:
// each read opens a connection with the sources' network settings, which
// bound the connection and the query, so that a PostgreSQL that does not
// answer fails the read instead of holding it, and closes it.
func PostgresCatalog(url string, network pgsql.Network) Catalog {
	return postgresCatalog{url: url, network: network}
}

type postgresCatalog struct {
	url     string
	network pgsql.Network
}

// Columns reads the table's columns: type, typmod, NOT NULL and default.
func (p postgresCatalog) Columns(ctx context.Context, schema, table string) ([]CatalogColumn, error) {
	cfg, err := pgsql.Config(p.url, p.network)
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: connect within %s: %w", cfg.ConnectTimeout, secret.RedactError(err))
	}
	defer pgsql.Close(ctx, conn)
	qctx, cancel := p.network.Query(ctx)
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
	var cols []CatalogColumn
	for rows.Next() {
		var c CatalogColumn
		if err := rows.Scan(&c.Name, &c.Type, &c.TypeMod, &c.NotNull, &c.Default); err != nil {
			return nil, fmt.Errorf("read the outbox table's column types: %w", err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the outbox table's column types: %w", err)
	}
	return cols, nil
}
