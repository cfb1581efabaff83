package pgsql

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// Querier is what reading the catalog needs of a connection (*pgx.Conn,
// a pool, a transaction).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Facts are what the catalog says, read once, about the server, the
// connection's role, the outbox tables and the publication. The verdicts
// (verdicts.go) judge them; the CDC source's setup, `outboxrelay check`
// and `outboxrelay init` share both, so a piece of advice is written
// once.
type Facts struct {
	// Version is server_version, VersionNum server_version_num.
	Version    string
	VersionNum int
	// WalLevel is the server's wal_level.
	WalLevel string
	// Database is current_database(), User current_user.
	Database, User string
	// Super, Replication: the role's attributes; RDSReplication: it is a
	// member of Amazon RDS's rds_replication, which stands for
	// REPLICATION there. CreateOnDatabase: it may create in the database
	// (a publication needs that, and the table's ownership).
	Super, Replication, RDSReplication, CreateOnDatabase bool
	// InRecovery: the server is a standby (pg_is_in_recovery), which
	// accepts no writes.
	InRecovery bool
	// Provider is the managed service the server runs on, told by its
	// administrators' role (provider.go), for the advice.
	Provider Provider
	// Tables are the outbox tables, in the order asked for.
	Tables []Table
	// Publication is the one asked for; its Name is empty when none was.
	Publication Publication
}

// Table is what the catalog says of one outbox table.
type Table struct {
	Schema, Name string
	// Exists: the role can see it; nothing below is known otherwise.
	Exists bool
	OID    uint32
	// Kind is pg_class.relkind: r a table, p a partitioned table.
	Kind string
	// Children: other tables inherit from it (or are its partitions).
	Children bool
	// Owner names the owner; Owned says the role is it, or a member.
	Owner string
	Owned bool
	// The role's privileges on the table, and USAGE on its schema.
	Select, Update, Delete, SchemaUsage bool
	// InPublication: pg_publication_tables lists it under the publication.
	InPublication bool
}

// Partitioned reports whether the table is a partitioned table.
func (t Table) Partitioned() bool { return t.Kind == "p" }

// Quoted is the table's name as SQL writes it.
func (t Table) Quoted() string { return pgident.Quote(t.Schema, t.Name) }

// Publication is what the catalog says of the publication.
type Publication struct {
	Name   string
	Exists bool
	// What it publishes, and whether FOR ALL TABLES.
	Insert, Update, Delete, AllTables bool
	// ViaRoot is publish_via_partition_root (PostgreSQL 13 and later;
	// false before, which has no partitioned tables to publish).
	ViaRoot bool
}

// TableName is an outbox table to read facts of.
type TableName struct{ Schema, Name string }

// ReadFacts reads the facts about tables and the publication named
// publication (none when empty), in a few catalog queries. An error is
// the driver's, wrapped with what was being read.
func ReadFacts(ctx context.Context, q Querier, publication string, tables ...TableName) (Facts, error) {
	var f Facts
	err := q.QueryRow(ctx, `
		SELECT current_setting('server_version'), current_setting('server_version_num')::int, current_setting('wal_level'),
		       current_database(), current_user, r.rolsuper, r.rolreplication,
		       EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication' AND pg_has_role(r.oid, g.oid, 'MEMBER')),
		       has_database_privilege(current_database(), 'CREATE'), pg_is_in_recovery()
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&f.Version, &f.VersionNum, &f.WalLevel,
		&f.Database, &f.User, &f.Super, &f.Replication, &f.RDSReplication, &f.CreateOnDatabase, &f.InRecovery)
	if err != nil {
		return Facts{}, fmt.Errorf("read the server's settings and the role's attributes: %w", err)
	}
	if f.Provider, err = readProvider(ctx, q); err != nil {
		return Facts{}, err
	}
	for _, tn := range tables {
		t := Table{Schema: tn.Schema, Name: tn.Name}
		err := q.QueryRow(ctx, `
			SELECT c.oid, c.relkind::text, pg_get_userbyid(c.relowner), pg_has_role(c.relowner, 'USAGE'),
			       has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),
			       has_schema_privilege(n.oid, 'USAGE'), EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&t.OID, &t.Kind, &t.Owner, &t.Owned,
			&t.Select, &t.Update, &t.Delete, &t.SchemaUsage, &t.Children)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return Facts{}, fmt.Errorf("look up outbox table %s: %w", t.Quoted(), err)
		default:
			t.Exists = true
		}
		f.Tables = append(f.Tables, t)
	}
	if publication == "" {
		return f, nil
	}
	p := &f.Publication
	p.Name = publication
	viaRoot := "false"
	if f.VersionNum >= 130000 {
		viaRoot = "pubviaroot"
	}
	err = q.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, puballtables, `+viaRoot+` FROM pg_publication WHERE pubname = $1`,
		publication).Scan(&p.Insert, &p.Update, &p.Delete, &p.AllTables, &p.ViaRoot)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return f, nil
	case err != nil:
		return Facts{}, fmt.Errorf("look up the publication: %w", err)
	}
	p.Exists = true
	for i := range f.Tables {
		t := &f.Tables[i]
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
			publication, t.Schema, t.Name).Scan(&t.InPublication)
		if err != nil {
			return Facts{}, fmt.Errorf("check the publication's tables: %w", err)
		}
	}
	return f, nil
}

// TimeColumn is the type of a column the application sets to each row's
// insert time, as format_type writes it.
type TimeColumn struct{ Type string }

// Millis reports whether the column is a bigint of milliseconds since the
// epoch.
func (c TimeColumn) Millis() bool { return c.Type == "bigint" }

// Usable reports whether the column tells a time: a timestamp, with or
// without time zone, or a bigint of milliseconds.
func (c TimeColumn) Usable() bool {
	switch c.Type {
	case "timestamp with time zone", "timestamp without time zone", "bigint":
		return true
	}
	return false
}

// ReadTimeColumn reads the type of column col of schema.table; found is
// false when the table has no such column. The caller refuses one that is
// not Usable in its own words.
func ReadTimeColumn(ctx context.Context, q Querier, schema, table, col string) (c TimeColumn, found bool, err error) {
	err = q.QueryRow(ctx, `SELECT format_type(a.atttypid, NULL)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped`,
		schema, table, col).Scan(&c.Type)
	if errors.Is(err, pgx.ErrNoRows) {
		return TimeColumn{}, false, nil
	}
	return c, err == nil, err
}
