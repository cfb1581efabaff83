package poller

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// checkPooling refuses, at every start, a connection pooler that would
// not keep the poller's sessions whole (pgsql/pooler.go says why and how
// it is told): transaction or statement pooling. It runs before any
// session setting is made, which on a transaction-pooled server session
// would stay behind for other clients. Behind session pooling, or with
// PostgreSQL answering itself, the poller starts; the former is logged.
func (s *Source) checkPooling(ctx context.Context) error {
	cfg, err := pgsql.Config(s.cfg.URL, s.cfg.Network, named)
	if err != nil {
		return err
	}
	// The network's session settings would stay on whichever server
	// session a transaction pooler lent these connections.
	cfg.AfterConnect = nil
	open := func(ctx context.Context) (*pgconn.PgConn, error) { return pgconn.ConnectConfig(ctx, &cfg.Config) }
	conn, err := open(ctx)
	if err != nil {
		return pgsql.ConnectFailed(classify("connect to PostgreSQL", err))
	}
	defer pgsql.Close(ctx, conn)
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	p, err := pgsql.ProbePooling(qctx, conn, open)
	if err != nil {
		return classify("tell whether a connection pooler answers postgres.url", err)
	}
	v := p.PollerVerdict(pgsql.HostPort(&cfg.Config))
	if err := v.Err(); err != nil {
		return err
	}
	if p != pgsql.Direct {
		s.log.Info(v.Detail, "table", s.cfg.Table)
	}
	return nil
}
