package poller

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Instance is a poller instance's number among the running instances of
// one relay: the lowest one free when it started, held with a session
// advisory lock until Release. With kafka.delivery exactly_once each
// instance publishes in Kafka transactions of its own, under the
// transactional id <prefix>-<number>: instances never fence each other,
// and an instance started after one died most often takes the dead one's
// number and fences it at once (its open transaction is aborted, which
// frees read_committed consumers without waiting for its timeout). Should
// the connection that holds the number be lost, another instance may take
// the number and fence this one, whose next transaction then fails as
// fenced: it stops, and restarted takes a free number.
type Instance struct {
	Number int
	conn   *pgx.Conn
}

// MaxInstances bounds the instances of one relay.
const MaxInstances = 1024

// TakeInstance takes the lowest free instance number of the relay that
// publishes under prefix, on a connection of its own that holds it.
func TakeInstance(ctx context.Context, url string, network pgsql.Network, prefix string) (*Instance, error) {
	network.SetDefaults()
	qctx, cancel := network.Query(ctx)
	defer cancel()
	conn, err := pgsql.Connect(qctx, url, network, named)
	if err != nil {
		return nil, pgsql.ConnectFailed(classify("connect to PostgreSQL", err))
	}
	// pg_try_advisory_lock never waits; the scan stops at the first
	// number it gets.
	var n int
	err = conn.QueryRow(qctx, `SELECT k FROM generate_series(0, $2::int4 - 1) AS k WHERE pg_try_advisory_lock($1::int4, k) LIMIT 1`,
		lockKey("outboxrelay poll instance "+prefix), MaxInstances).Scan(&n)
	if err != nil {
		closeConn(ctx, conn)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, connector.Permanent(fmt.Errorf("%d instances of this relay already run (transactional id prefix %q)", MaxInstances, prefix))
		}
		return nil, classify("take an instance number", err)
	}
	return &Instance{Number: n, conn: conn}, nil
}

// TransactionalID is the instance's transactional id under prefix.
func (i *Instance) TransactionalID(prefix string) string {
	return prefix + "-" + strconv.Itoa(i.Number)
}

// Release lets the number go.
func (i *Instance) Release(ctx context.Context) { closeConn(ctx, i.conn) }
