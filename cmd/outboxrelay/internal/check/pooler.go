package check

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// checkPooler says whether a connection pooler answers postgres.url, and
// judges it as the source does when it starts: the CDC source refuses
// any (logical replication needs the server itself), the poller all but
// session pooling. It probes on the check's first connection before any
// other query runs there, as the probe needs, and returns what reports
// the result, after the connection's own.
func (c *pgCheck) checkPooler(ctx context.Context, pcfg *pgx.ConnConfig) (report func()) {
	open := func(ctx context.Context) (*pgconn.PgConn, error) { return pgconn.ConnectConfig(ctx, &pcfg.Config) }
	p, err := pgsql.ProbePooling(ctx, c.conn.PgConn(), open)
	if err != nil {
		return func() {
			c.r.add(Warn, CheckPooler, "cannot tell whether a connection pooler answers postgres.url: "+err.Error(), "")
		}
	}
	at := pgsql.HostPort(&pcfg.Config)
	if c.cfg.Source == "cdc" {
		return func() { c.report(CheckPooler, p.ReplicationVerdict(at)) }
	}
	return func() { c.report(CheckPooler, p.PollerVerdict(at)) }
}
