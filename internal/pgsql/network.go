package pgsql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Network bounds how long a PostgreSQL connection may stay silent or
// unanswered before the relay gives up on it. A NAT gateway, firewall or
// load balancer that forgets a flow sends no FIN and no RST: without these
// bounds the kernel keeps such a socket for hours (two of them before the
// first keepalive probe), and the relay waits on it for as long. With the
// defaults the kernel ends a connection whose peer is gone within about
// 10 seconds, idle (keepalive) or not (TCP_USER_TIMEOUT), on both ends.
//
// The zero value of each field means its default.
type Network struct {
	// Keepalive is the idle time before the first TCP keepalive probe and
	// the time between probes; after three unanswered probes the kernel
	// ends the connection (with TCPUserTimeout, once that has passed
	// since the peer last answered). Default 5s: a probe is a packet
	// without data, and a peer that is there answers it from its kernel.
	Keepalive time.Duration `yaml:"keepalive" doc:"TCP keepalive on every PostgreSQL connection: idle time before the first probe and between probes; three unanswered probes end the connection (on Linux, once postgres.tcp_user_timeout has passed)."`
	// TCPUserTimeout is how long data sent may stay unacknowledged (or
	// keepalive probes unanswered) before the kernel ends the connection
	// (TCP_USER_TIMEOUT, Linux only). It bounds a peer that is gone, not
	// a slow one: the peer's kernel acknowledges what arrives, whatever
	// its process is doing, and a full receive window whose probes are
	// answered does not count. Default 10s.
	TCPUserTimeout time.Duration `yaml:"tcp_user_timeout" doc:"TCP_USER_TIMEOUT on every PostgreSQL connection (Linux): how long sent data, or keepalive probes, may stay unacknowledged before the kernel ends the connection. A slow server's kernel still acknowledges, so it bounds a server or network that is gone, not a busy one."`
	// ConnectTimeout bounds opening a connection, authentication included,
	// unless the connection string sets connect_timeout. Default 10s.
	ConnectTimeout time.Duration `yaml:"connect_timeout" doc:"Bound on opening a PostgreSQL connection, authentication included, unless postgres.url sets connect_timeout."`
	// QueryTimeout bounds round trips that are not the replication
	// stream: the poller's claims, marks and retention, the CDC source's
	// setup and slot queries, the Debezium router's read of the outbox
	// table's column types. (The metrics probe and the heartbeat have
	// bounds of their own.) Default 30s.
	QueryTimeout time.Duration `yaml:"query_timeout" doc:"Bound on PostgreSQL round trips other than the replication stream (the poller's claims, marks and retention, the CDC setup and slot queries, the Debezium router's column types); a connection that does not answer in time is closed and replaced. The poller's claiming session also gets idle_in_transaction_session_timeout of four times it."`
}

// SetDefaults fills in the zero fields.
func (n *Network) SetDefaults() {
	if n.Keepalive == 0 {
		n.Keepalive = 5 * time.Second
	}
	if n.TCPUserTimeout == 0 {
		n.TCPUserTimeout = 10 * time.Second
	}
	if n.ConnectTimeout == 0 {
		n.ConnectTimeout = 10 * time.Second
	}
	if n.QueryTimeout == 0 {
		n.QueryTimeout = 30 * time.Second
	}
}

// Validate reports every problem at once; it expects defaults to be set.
func (n *Network) Validate() error {
	var errs []error
	for _, f := range []struct {
		key string
		d   time.Duration
	}{
		{"postgres.keepalive", n.Keepalive},
		{"postgres.tcp_user_timeout", n.TCPUserTimeout},
		{"postgres.connect_timeout", n.ConnectTimeout},
		{"postgres.query_timeout", n.QueryTimeout},
	} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", f.key, f.d))
		} else if f.d%time.Millisecond != 0 || (f.d > 0 && f.d < time.Millisecond) {
			errs = append(errs, fmt.Errorf("%s: %s is finer than a millisecond, which the kernel cannot take", f.key, f.d))
		}
	}
	return errors.Join(errs...)
}

// Apply makes every connection cfg opens use n: keepalive and
// TCP_USER_TIMEOUT on the socket, and the connect timeout unless the
// connection string set one. It replaces cfg's dialer (and that of every
// fallback), which ParseConfig made with no keepalive of ours.
func (n Network) Apply(cfg *pgconn.Config) {
	n.SetDefaults()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = n.ConnectTimeout
	}
	d := &net.Dialer{
		Timeout: cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     n.Keepalive,
			Interval: n.Keepalive,
			Count:    3,
		},
		Control: userTimeoutControl(n.TCPUserTimeout),
	}
	cfg.DialFunc = d.DialContext
	// The server's side of the same socket: without these, a session
	// whose client vanished keeps its locks (a claim's rows, a slot) until
	// the server's kernel gives up, hours later. Any role may set them.
	// An ordinary connection sets them once connected (SessionDefaults),
	// since PgBouncer refuses them in the startup packet; a replication
	// connection, which has no extended protocol and which no pooler
	// carries anyway, sends them there.
	secs := strconv.Itoa(max(int(n.Keepalive/time.Second), 1))
	server := map[string]string{
		"tcp_keepalives_idle":     secs,
		"tcp_keepalives_interval": secs,
		"tcp_keepalives_count":    "3",
		"tcp_user_timeout":        strconv.FormatInt(n.TCPUserTimeout.Milliseconds(), 10),
	}
	if _, replication := cfg.RuntimeParams["replication"]; !replication {
		SessionDefaults(server)(cfg)
		return
	}
	for k, v := range server {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
}

// Query returns ctx bounded by the query timeout, for one round trip that
// is not the replication stream.
func (n Network) Query(ctx context.Context) (context.Context, context.CancelFunc) {
	n.SetDefaults()
	return context.WithTimeout(ctx, n.QueryTimeout)
}
