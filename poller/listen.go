package poller

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// listener owns the connection that LISTENs for the table's notifications
// and holds this instance's member lock. Notifications only wake the claim
// loop, through a channel of one that coalesces them; none is queued.
type listener struct {
	src  *Source
	wake chan<- struct{}
	conn *pgconn.PgConn
	// sess is conn's session on the server, to end it if conn dies: it
	// holds the member lock, and other instances would count this one
	// twice while it lives.
	sess session
}

func (s *Source) openListener(ctx context.Context, wake chan<- struct{}) (*listener, error) {
	l := &listener{src: s, wake: wake}
	if err := l.connect(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *listener) notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// connect opens the connection, takes the member lock, checks that every
// other instance hashes into as many buckets, and listens.
func (l *listener) connect(ctx context.Context) error {
	s := l.src
	conn, err := pgsql.ConnectPg(ctx, s.cfg.URL, s.cfg.Network, named, func(cfg *pgconn.Config) {
		cfg.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { l.notify() }
	})
	if err != nil {
		return classify("open the listening connection", err)
	}
	// Instances with different poll.buckets hash an aggregate into
	// different buckets, and so could both hold its rows: each instance
	// holds a shared lock keyed by its bucket count for as long as it
	// runs, and refuses to start beside one with another count. Taking the
	// lock before looking means of two racing instances the later one
	// always sees the earlier.
	check := fmt.Sprintf(`SELECT pg_advisory_lock_shared(%[1]d, %[2]d);
		SELECT coalesce(string_agg(DISTINCT objid::text, ', '), '') FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = %[1]d::oid AND objid <> %[2]d::oid;
		LISTEN %[3]s;
		%[4]s`, s.memberKey, s.cfg.Buckets, s.n.channel, sessionStartSQL)
	qctx, cancel := s.cfg.Network.Query(ctx)
	results, err := conn.Exec(qctx, check).ReadAll()
	cancel()
	if err != nil {
		pgsql.Close(ctx, conn)
		return classify("take the member lock and listen", err)
	}
	if others := string(results[1].Rows[0][0]); others != "" {
		pgsql.Close(ctx, conn)
		return connector.Permanent(fmt.Errorf("another outboxrelay polls %s with poll.buckets %s, and this one has %d: every instance must use the same poll.buckets, or they could publish an aggregate's events out of order; stop the others before changing it",
			s.cfg.Table, others, s.cfg.Buckets))
	}
	l.conn, l.sess = conn, sessionFrom(results[3])
	return nil
}

// run waits for notifications until ctx is done. A lost connection is
// opened again with backoff, meanwhile the claim loop polls on its own; a
// bucket count mismatch found on reconnecting goes to fatal.
func (l *listener) run(ctx context.Context, fatal chan<- error) {
	s := l.src
	defer func() {
		if l.conn != nil {
			pgsql.Close(ctx, l.conn)
		}
	}()
	wait := s.cfg.Interval
	for {
		if l.conn == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if err := l.connect(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				if connector.IsPermanent(err) {
					fatal <- err
					return
				}
				wait = min(2*wait, s.cfg.MaxInterval)
				s.log.Warn("cannot listen for notifications; polling meanwhile", "err", err, "retry_in", wait)
				continue
			}
			wait = s.cfg.Interval
			l.notify() // rows may have come while nobody listened
		}
		// A connection that died without a word delivers no more
		// notifications and no error either: after a quiet query timeout,
		// a round trip tells a quiet table from a dead connection.
		waitCtx, cancel := context.WithTimeout(ctx, s.cfg.Network.QueryTimeout)
		err := l.conn.WaitForNotification(waitCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && pgconn.Timeout(err) {
			pingCtx, cancel := s.cfg.Network.Query(ctx)
			_, err = l.conn.Exec(pingCtx, "SELECT 1").ReadAll()
			cancel()
			if ctx.Err() != nil {
				return
			}
		}
		if err != nil {
			s.log.Warn("lost the listening connection; polling until it is back", "err", err)
			pgsql.Close(ctx, l.conn)
			l.conn = nil
			if pgconn.Timeout(err) {
				s.endSessions(ctx, "listening", []session{l.sess})
			}
		}
	}
}
