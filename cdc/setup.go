package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// prepare checks the server and the table, and creates the publication and
// the slot when they are missing. It returns the slot's confirmed position.
// It runs on an ordinary connection before each replication session; every
// step is idempotent, and two relays racing to create the same object are
// both fine.
func (s *Source) prepare(ctx context.Context) (pglogrepl.LSN, error) {
	conn, err := pgx.Connect(ctx, s.cfg.URL)
	if err != nil {
		return 0, classify("connect to PostgreSQL", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return 0, classify("read wal_level", err)
	}
	if walLevel != "logical" {
		return 0, connector.Permanent(fmt.Errorf("wal_level is %q, and logical replication needs %q: run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL, or use source: poll", walLevel, "logical"))
	}
	if err := s.checkColumns(ctx, conn); err != nil {
		return 0, err
	}
	if err := s.ensurePublication(ctx, conn); err != nil {
		return 0, err
	}
	return s.ensureSlot(ctx, conn)
}

func (s *Source) checkColumns(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `
		SELECT a.attname
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`,
		s.schema, s.table)
	if err != nil {
		return classify("read the outbox table's columns", err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return classify("read the outbox table's columns", err)
	}
	if len(cols) == 0 {
		return connector.Permanent(fmt.Errorf("outbox table %s.%s does not exist, or the role cannot see it (create it, or set outbox.table)", s.schema, s.table))
	}
	var missing []string
	m := s.cfg.Columns
	for _, c := range []string{m.ID, m.AggregateType, m.AggregateID} {
		if !slices.Contains(cols, c) {
			missing = append(missing, fmt.Sprintf("%q", c))
		}
	}
	if len(missing) > 0 {
		return connector.Permanent(fmt.Errorf("outbox table %s.%s has no column %s (it has %s); add them or map yours under outbox.columns", s.schema, s.table, strings.Join(missing, ", "), strings.Join(cols, ", ")))
	}
	return nil
}

func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn) error {
	var exists, insert bool
	err := conn.QueryRow(ctx, `SELECT true, pubinsert FROM pg_publication WHERE pubname = $1`, s.cfg.Publication).Scan(&exists, &insert)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return classify("look up the publication", err)
	}
	if !exists {
		if !*s.cfg.CreatePublication {
			return connector.Permanent(fmt.Errorf("publication %q does not exist and cdc.create_publication is false: create it with CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
				s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize(), pgx.Identifier{s.schema, s.table}.Sanitize()))
		}
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
			pgx.Identifier{s.cfg.Publication}.Sanitize(), pgx.Identifier{s.schema, s.table}.Sanitize())
		if _, err := conn.Exec(ctx, sql); err != nil && !isDuplicate(err) {
			return classify("create the publication", err)
		}
		s.log.Info("created publication", "publication", s.cfg.Publication, "table", s.cfg.Table)
		return nil
	}
	if !insert {
		return connector.Permanent(fmt.Errorf("publication %q does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')", s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize()))
	}
	var covers bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
		s.cfg.Publication, s.schema, s.table).Scan(&covers)
	if err != nil {
		return classify("check the publication's tables", err)
	}
	if !covers {
		return connector.Permanent(fmt.Errorf("publication %q does not include table %s.%s: ALTER PUBLICATION %s ADD TABLE %s",
			s.cfg.Publication, s.schema, s.table, pgx.Identifier{s.cfg.Publication}.Sanitize(), pgx.Identifier{s.schema, s.table}.Sanitize()))
	}
	return nil
}

func (s *Source) ensureSlot(ctx context.Context, conn *pgx.Conn) (pglogrepl.LSN, error) {
	var plugin, database string
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT coalesce(plugin, ''), coalesce(database, ''), confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
		s.cfg.Slot).Scan(&plugin, &database, &confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		var lsn string
		err = conn.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, s.cfg.Slot).Scan(&lsn)
		if isDuplicate(err) {
			return s.ensureSlot(ctx, conn)
		}
		if err != nil {
			return 0, classify("create the replication slot", err)
		}
		s.log.Info("created replication slot", "slot", s.cfg.Slot, "lsn", lsn)
		return pglogrepl.ParseLSN(lsn)
	}
	if err != nil {
		return 0, classify("look up the replication slot", err)
	}
	if plugin != "pgoutput" {
		return 0, connector.Permanent(fmt.Errorf("replication slot %q uses plugin %q; outboxrelay needs a pgoutput slot: use another cdc.slot, or drop this one", s.cfg.Slot, plugin))
	}
	if database != conn.Config().Database {
		return 0, connector.Permanent(fmt.Errorf("replication slot %q belongs to database %q, not %q: use another cdc.slot", s.cfg.Slot, database, conn.Config().Database))
	}
	if confirmed == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*confirmed)
}

func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	// duplicate_object for slots and publications; unique_violation when
	// two sessions race on a catalog's unique index.
	return errors.As(err, &pe) && (pe.Code == pgerrcode.DuplicateObject || pe.Code == pgerrcode.UniqueViolation)
}
