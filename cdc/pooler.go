package cdc

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// connectReplication opens a replication connection to url, and refuses
// one that a connection pooler answers (pgsql/pooler.go says why and how
// it is told) with an error that names the pooler's address and asks for
// the server's own: PgBouncer before 1.23 refuses the connection at its
// start (SQLSTATE 08P01), which is then told apart from a malformed
// packet by asking the same address over an ordinary connection; a
// pooler that passes it on is caught by the pid it made up.
func connectReplication(ctx context.Context, url string, network pgsql.Network, opts ...pgsql.Option) (*pgconn.PgConn, error) {
	cfg, err := pgsql.Config(url, network, append([]pgsql.Option{pgsql.Replication()}, opts...)...)
	if err != nil {
		return nil, err
	}
	at := pgsql.HostPort(&cfg.Config)
	conn, err := pgconn.ConnectConfig(ctx, &cfg.Config)
	if err != nil {
		if pgsql.RefusedAtStartup(err) {
			if pooled, perr := pgsql.PooledAt(ctx, url, network); perr == nil && pooled {
				return nil, pgsql.ErrPooledReplication(at, err)
			}
		}
		return nil, err
	}
	qctx, cancel := network.Query(ctx)
	defer cancel()
	pooled, err := pgsql.IsPooled(qctx, conn)
	if err != nil || pooled {
		pgsql.Close(ctx, conn)
		if err == nil {
			err = pgsql.ErrPooledReplication(at, nil)
		}
		return nil, err
	}
	return conn, nil
}
