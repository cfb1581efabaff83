package pgsql

import (
	"context"
	"fmt"

	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// Provider is the managed PostgreSQL service a server runs on, as far as
// its roles tell: none of them gives its users a superuser, and each has
// its own way to let a role stream changes and to turn on logical
// decoding, which the verdicts then name. docs/operations.md cites each
// provider's documentation.
type Provider string

// The providers told apart, by the administrators' role each creates in
// every server.
const (
	// SelfManaged: none of the roles below exists.
	SelfManaged Provider = ""
	// RDS is Amazon RDS for PostgreSQL and Aurora PostgreSQL
	// (rds_superuser).
	RDS Provider = "rds"
	// CloudSQL is Google Cloud SQL for PostgreSQL (cloudsqlsuperuser).
	CloudSQL Provider = "cloudsql"
	// Azure is Azure Database for PostgreSQL flexible server
	// (azure_pg_admin).
	Azure Provider = "azure"
)

// providerSQL names the provider by the first of its administrators'
// roles that exists; a self-managed server may have created one of these
// names, which then only changes the advice.
const providerSQL = `SELECT coalesce((SELECT CASE rolname WHEN 'rds_superuser' THEN 'rds' WHEN 'cloudsqlsuperuser' THEN 'cloudsql' ELSE 'azure' END
	FROM pg_roles WHERE rolname IN ('rds_superuser', 'cloudsqlsuperuser', 'azure_pg_admin') ORDER BY rolname DESC LIMIT 1), '')`

// readProvider reads the provider (ReadFacts).
func readProvider(ctx context.Context, q Querier) (Provider, error) {
	var p string
	if err := q.QueryRow(ctx, providerSQL).Scan(&p); err != nil {
		return SelfManaged, fmt.Errorf("tell the managed service by its roles: %w", err)
	}
	return Provider(p), nil
}

// Name is the provider's name for people.
func (p Provider) Name() string {
	switch p {
	case RDS:
		return "Amazon RDS or Aurora"
	case CloudSQL:
		return "Google Cloud SQL"
	case Azure:
		return "Azure Database for PostgreSQL"
	}
	return "a self-managed server"
}

// replicationFix is how role gets the right to stream changes there.
func (p Provider) replicationFix(role string) string {
	q := pgident.Quote(role)
	switch p {
	case RDS:
		return fmt.Sprintf("on Amazon RDS and Aurora no role has REPLICATION; as the master user (a member of rds_superuser): GRANT rds_replication TO %s;", q)
	case CloudSQL:
		return fmt.Sprintf("on Cloud SQL, as a member of cloudsqlsuperuser (the postgres user): ALTER ROLE %s WITH REPLICATION; and set the cloudsql.logical_decoding flag on", q)
	case Azure:
		return fmt.Sprintf("on Azure Database for PostgreSQL, as the server admin (a member of azure_pg_admin): ALTER ROLE %s WITH REPLICATION;", q)
	}
	return fmt.Sprintf("as a superuser: ALTER ROLE %s REPLICATION; (Amazon RDS: GRANT rds_replication TO %s;)", q, q)
}

// logicalWALFix is how wal_level becomes logical there.
func (p Provider) logicalWALFix() string {
	switch p {
	case RDS:
		return "on Amazon RDS set rds.logical_replication = 1 in the instance's DB parameter group (Aurora: the DB cluster parameter group) and reboot; or use source: poll"
	case CloudSQL:
		return "on Cloud SQL set the database flag cloudsql.logical_decoding to on, which restarts the instance; or use source: poll"
	case Azure:
		return "on Azure Database for PostgreSQL set the server parameter wal_level to logical and restart the server; or use source: poll"
	}
	return "as a superuser: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (on a managed service, set the parameter in its console: rds.logical_replication = 1 on Amazon RDS, cloudsql.logical_decoding = on on Cloud SQL, wal_level = logical on Azure); or use source: poll"
}
