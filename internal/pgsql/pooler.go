package pgsql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// A connection pooler (PgBouncer, and the like) between the relay and
// PostgreSQL breaks what each source relies on in its own way:
//
//   - Logical replication needs a walsender of its own on the server that
//     holds the slot. PgBouncer before 1.23 refuses a replication
//     connection ("unsupported startup parameter: replication"); later
//     ones pair it with a server connection of its own, which pools
//     nothing and adds a hop whose timeouts and restarts cut the stream.
//   - The poller holds session advisory locks (its member and instance
//     numbers), LISTENs, and caches prepared statements per connection.
//     Under transaction pooling each transaction may run on another server
//     session: the locks stay behind on a session the pooler hands to
//     others, notifications go nowhere, and a prepared statement is found
//     twice or not at all. Under statement pooling a claim's transaction
//     is refused outright. Session pooling gives each client one server
//     session for as long as it stays connected, which is all it needs.
//
// How a pooler is recognised: the process id in a connection's
// BackendKeyData, which PostgreSQL sets to its backend's pid for the
// client to cancel with, is the pooler's own invention (PgBouncer sends
// random bytes, since the server session behind a client changes), and so
// differs from what pg_backend_pid() answers. A TCP proxy (HAProxy, a
// cloud load balancer) passes the message on untouched. One round trip,
// on any connection, replication ones included, and no message text is
// read. Which pooling mode it is, is then seen from what the pooler does
// with two clients (ProbePooling).

// Pooling is what answers a connection string: PostgreSQL itself, or a
// pooler in one of its modes.
type Pooling int

// The poolings, from harmless to the worst for the poller.
const (
	// Direct: PostgreSQL answers (or a proxy that passes the session on).
	Direct Pooling = iota
	// SessionPooling: a pooler that keeps one server session per client
	// connection.
	SessionPooling
	// Pooled: a pooler whose mode was not probed.
	Pooled
	// TransactionPooling: a pooler that may hand each transaction to
	// another server session.
	TransactionPooling
	// StatementPooling: a pooler that refuses transactions of more than
	// one statement.
	StatementPooling
)

func (p Pooling) String() string {
	switch p {
	case Direct:
		return "direct"
	case SessionPooling:
		return "session pooling"
	case Pooled:
		return "pooled"
	case TransactionPooling:
		return "transaction pooling"
	case StatementPooling:
		return "statement pooling"
	}
	return "pooling " + strconv.Itoa(int(p))
}

// backendPID asks the server for the pid of the session running the
// query. The simple protocol leaves no prepared statement behind on a
// pooled server session that another client gets next.
func backendPID(ctx context.Context, conn *pgconn.PgConn, prefix string) (uint32, error) {
	res, err := conn.Exec(ctx, prefix+"SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return 0, err
	}
	last := res[len(res)-1]
	if len(last.Rows) != 1 || len(last.Rows[0]) != 1 {
		return 0, errors.New("pg_backend_pid() returned no row")
	}
	pid, err := strconv.ParseUint(string(last.Rows[0][0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("pg_backend_pid() returned %q: %w", last.Rows[0][0], err)
	}
	return uint32(pid), nil
}

// IsPooled reports whether conn reaches PostgreSQL through a pooler: the
// pid the connection was given at its start is not its server session's.
func IsPooled(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	pid, err := backendPID(ctx, conn, "")
	if err != nil {
		return false, fmt.Errorf("ask the server for its backend pid: %w", err)
	}
	return pid != conn.PID(), nil
}

// ProbePooling tells what answers conn, an ordinary connection on which
// nothing else runs meanwhile: PostgreSQL, or a pooler and its mode. Only
// for a pooler does it open a second connection with another, and close
// it: a is asked for its server session's pid, b opens a transaction (a
// pooler in statement mode refuses it) and is asked for its own, then a
// again. Under session pooling a keeps its session and b has another.
// Under transaction pooling a's session went back to the pool when its
// query ended, and b's transaction takes the idle session used last
// (PgBouncer's default, server_round_robin = 0), or a must take another
// one while b holds its own: either shows. Both queries run in the simple
// protocol and leave nothing behind on the server sessions.
func ProbePooling(ctx context.Context, conn *pgconn.PgConn, another func(context.Context) (*pgconn.PgConn, error)) (Pooling, error) {
	pooled, err := IsPooled(ctx, conn)
	if err != nil || !pooled {
		return Direct, err
	}
	b, err := another(ctx)
	if err != nil {
		return Pooled, fmt.Errorf("open a second connection to tell the pooler's mode: %w", err)
	}
	defer Close(ctx, b)
	a1, err := backendPID(ctx, conn, "")
	if err != nil {
		return Pooled, fmt.Errorf("ask the pooler's server session for its pid: %w", err)
	}
	held, err := backendPID(ctx, b, "BEGIN; ")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgerrcode.ProtocolViolation {
		// PgBouncer: "transaction blocks not allowed in statement pooling mode".
		return StatementPooling, nil
	}
	if err != nil {
		return Pooled, fmt.Errorf("open a transaction through the pooler: %w", err)
	}
	a2, err := backendPID(ctx, conn, "")
	if err != nil {
		return Pooled, fmt.Errorf("ask the pooler's server session for its pid again: %w", err)
	}
	return poolingOf(a1, held, a2), nil
}

// poolingOf judges a pooler by the server sessions' pids: a's before b
// opened a transaction, b's in it, and a's after.
func poolingOf(a1, held, a2 uint32) Pooling {
	if a1 != a2 || held == a1 {
		return TransactionPooling
	}
	return SessionPooling
}

// PollerVerdict judges p for the poller, which needs one server session
// per connection. What answers is at url's host and port.
func (p Pooling) PollerVerdict(hostPort string) Verdict {
	switch p {
	case Direct:
		return Verdict{Level: OK, Detail: "postgres.url reaches PostgreSQL directly"}
	case SessionPooling:
		return Verdict{Level: OK, Detail: fmt.Sprintf("postgres.url reaches PostgreSQL through a connection pooler at %s in session pooling mode, which keeps the poller's sessions whole", hostPort)}
	}
	return Verdict{Fail,
		fmt.Sprintf("postgres.url leads to a connection pooler at %s in %s mode (PgBouncer, or the like): the poller holds session advisory locks, LISTENs and keeps prepared statements, all of which stay behind on a server session that such a pooler lends to other clients between transactions", hostPort, p),
		"give the relay session pooling: in PgBouncer a database entry of its own with pool_mode=session (e.g. outbox_session = host=<server> dbname=<db> pool_mode=session) and postgres.url naming it, or point postgres.url at PostgreSQL itself"}
}

// ReplicationVerdict judges p for logical replication, which needs a
// walsender of its own on the server that holds the slot.
func (p Pooling) ReplicationVerdict(hostPort string) Verdict {
	if p == Direct {
		return Verdict{Level: OK, Detail: "postgres.url reaches PostgreSQL directly"}
	}
	return Verdict{Fail,
		fmt.Sprintf("postgres.url leads to a connection pooler at %s (PgBouncer, or the like), not to PostgreSQL: logical replication needs a connection of its own to the server that holds the slot, which a pooler either refuses (PgBouncer before 1.23: unsupported startup parameter: replication) or passes on without pooling it", hostPort),
		"point postgres.url at the PostgreSQL server's own host and port (or a proxy that forwards TCP, not a pooler); the application can keep using the pooler"}
}

// ErrPooledReplication wraps the refusal of a replication connection by
// a pooler, or a replication connection a pooler answered, into the
// verdict's permanent error, naming the host and port: no reconnect helps
// until postgres.url changes.
func ErrPooledReplication(hostPort string, cause error) error {
	v := Pooled.ReplicationVerdict(hostPort)
	if cause != nil {
		return connector.Permanent(fmt.Errorf("%s: %s (the pooler said: %w)", v.Detail, v.Fix, secret.RedactError(cause)))
	}
	return v.Err()
}

// RefusedAtStartup reports an error a pooler gives when it refuses a
// connection's startup: PgBouncer sends every error of its own as
// SQLSTATE 08P01 (protocol violation), which PostgreSQL itself sends at
// startup only for a malformed packet.
func RefusedAtStartup(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerrcode.ProtocolViolation
}

// HostPort is where the connection string's first host is, for messages.
func HostPort(cfg *pgconn.Config) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return "socket " + cfg.Host
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// PooledAt reports whether an ordinary connection to url reaches
// PostgreSQL through a pooler.
func PooledAt(ctx context.Context, url string, n Network) (bool, error) {
	conn, err := ConnectPg(ctx, url, n)
	if err != nil {
		return false, err
	}
	defer Close(ctx, conn)
	qctx, cancel := n.Query(ctx)
	defer cancel()
	return IsPooled(qctx, conn)
}
