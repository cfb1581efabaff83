package check_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestManagedServiceAdvice: a role without REPLICATION gets the advice of
// the managed service its server runs on, told by the administrators'
// role each service creates, simulated here by creating that role in a
// server of this test's own (roles are the whole server's): Amazon RDS
// and Aurora (rds_superuser: grant rds_replication, which the check then
// accepts as REPLICATION), Cloud SQL (cloudsqlsuperuser: ALTER ROLE ...
// WITH REPLICATION and the cloudsql.logical_decoding flag), Azure
// (azure_pg_admin: ALTER ROLE ... WITH REPLICATION as the server admin).
func TestManagedServiceAdvice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testenv.PostgresServer(t)
	dbURL, err := srv.CreateDatabase(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	s := newSetup(ctx, t, dbURL, "SELECT", "PUBLICATION")
	cfg, _ := s.config(t)

	r, _ := run(ctx, t, cfg)
	expect(t, r, check.CheckRole, check.Fail, "lacks the REPLICATION attribute", fmt.Sprintf(`as a superuser: ALTER ROLE "%s" REPLICATION;`, s.role))

	s.exec(ctx, t, `CREATE ROLE rds_superuser NOLOGIN`, `CREATE ROLE rds_replication NOLOGIN`)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckRole, check.Fail, "lacks the REPLICATION attribute", "rds_superuser", fmt.Sprintf(`GRANT rds_replication TO "%s";`, s.role))
	s.exec(ctx, t, fmt.Sprintf(`GRANT rds_replication TO %s`, s.role))
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckRole, check.Pass, "may stream changes")
	s.exec(ctx, t, fmt.Sprintf(`REVOKE rds_replication FROM %s`, s.role), `DROP ROLE rds_replication`, `DROP ROLE rds_superuser`)

	s.exec(ctx, t, `CREATE ROLE cloudsqlsuperuser NOLOGIN`)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckRole, check.Fail, "cloudsqlsuperuser", fmt.Sprintf(`ALTER ROLE "%s" WITH REPLICATION;`, s.role), "cloudsql.logical_decoding")
	s.exec(ctx, t, `DROP ROLE cloudsqlsuperuser`, `CREATE ROLE azure_pg_admin NOLOGIN`)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckRole, check.Fail, "azure_pg_admin", "server admin", fmt.Sprintf(`ALTER ROLE "%s" WITH REPLICATION;`, s.role))
}
