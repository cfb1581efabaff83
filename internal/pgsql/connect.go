package pgsql

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// Option adjusts a connection's configuration after its connection
// string is parsed and before the network bounds are applied.
type Option func(*pgconn.Config)

// Param sets a run-time parameter, whatever the connection string says.
func Param(key, value string) Option {
	return func(c *pgconn.Config) { c.RuntimeParams[key] = value }
}

// DefaultParam sets a run-time parameter unless the connection string
// sets it: the user's choice wins.
func DefaultParam(key, value string) Option {
	return func(c *pgconn.Config) {
		if _, set := c.RuntimeParams[key]; !set {
			c.RuntimeParams[key] = value
		}
	}
}

// SessionDefaults sets run-time parameters for the session, each unless
// the connection string sets it, as DefaultParam does, but with set_config
// once connected rather than in the startup packet: PgBouncer refuses a
// startup packet with parameters it does not track ("unsupported startup
// parameter"), and so would refuse the connection in any pooling mode.
// They cost one round trip when the connection opens. Not for a
// replication connection, which has no extended protocol.
func SessionDefaults(params map[string]string) Option {
	return func(c *pgconn.Config) {
		var sql strings.Builder
		var args [][]byte
		for _, k := range slices.Sorted(maps.Keys(params)) {
			if _, set := c.RuntimeParams[k]; set {
				continue
			}
			if sql.Len() == 0 {
				sql.WriteString("SELECT ")
			} else {
				sql.WriteString(", ")
			}
			fmt.Fprintf(&sql, "set_config($%d, $%d, false)", len(args)+1, len(args)+2)
			args = append(args, []byte(k), []byte(params[k]))
		}
		if len(args) == 0 {
			return
		}
		query, after := sql.String(), c.AfterConnect
		c.AfterConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
			if after != nil {
				if err := after(ctx, conn); err != nil {
					return err
				}
			}
			if _, err := conn.ExecParams(ctx, query, args, nil, nil, nil).Close(); err != nil {
				return fmt.Errorf("set the session's parameters: %w", err)
			}
			return nil
		}
	}
}

// Replication makes the connection a logical replication connection to
// its database, which speaks the replication protocol (IDENTIFY_SYSTEM,
// START_REPLICATION) and ordinary SQL.
func Replication() Option { return Param("replication", "database") }

// ConnectTimeout bounds opening the connection by d, whatever the
// connection string's connect_timeout says.
func ConnectTimeout(d time.Duration) Option {
	return func(c *pgconn.Config) { c.ConnectTimeout = d }
}

// Database connects to the database name, whatever the connection string
// names.
func Database(name string) Option {
	return func(c *pgconn.Config) { c.Database = name }
}

// Config parses url and applies opts, then the network bounds n. A url
// that does not parse is a permanent error under postgres.url, with the
// connection string (and its password) kept out of the message. pgx's
// parser is used for every kind of connection: it takes its own keys
// (statement_cache_capacity and the like) out of the run-time parameters,
// which a server would refuse as unknown.
func Config(url string, n Network, opts ...Option) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, connector.Permanent(fmt.Errorf("postgres.url: %w", secret.RedactError(err)))
	}
	Configure(&cfg.Config, n, opts...)
	return cfg, nil
}

// Configure applies opts, then the network bounds n, to a configuration
// parsed elsewhere (a pool's).
func Configure(cfg *pgconn.Config, n Network, opts ...Option) {
	for _, o := range opts {
		o(cfg)
	}
	n.Apply(cfg)
}

// Connect opens an ordinary connection to url: [Config], then connect.
// The error of a failed connection is the driver's, for the caller to
// classify with what it was doing.
func Connect(ctx context.Context, url string, n Network, opts ...Option) (*pgx.Conn, error) {
	cfg, err := Config(url, n, opts...)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// ConnectPg opens a connection to url without pgx's statement cache and
// types: a replication connection (with [Replication]), or one that only
// listens.
func ConnectPg(ctx context.Context, url string, n Network, opts ...Option) (*pgconn.PgConn, error) {
	cfg, err := Config(url, n, opts...)
	if err != nil {
		return nil, err
	}
	return pgconn.ConnectConfig(ctx, &cfg.Config)
}

// closeTimeout bounds saying goodbye to a server: a close waits for
// nothing the relay needs, so a server that does not take the Terminate
// message at once is left to notice the closed socket.
const closeTimeout = 5 * time.Second

// Closer is a connection: *pgx.Conn or *pgconn.PgConn.
type Closer interface {
	Close(ctx context.Context) error
}

// Close closes conn within closeTimeout, even when ctx is already done
// (as it is when a source stops): the Terminate message is sent, not
// skipped.
func Close(ctx context.Context, conn Closer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}
