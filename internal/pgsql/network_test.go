package pgsql

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sys/unix"
)

func TestNetworkValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    Network
		want string // substring of the error; empty: valid
	}{
		{"defaults", Network{}, ""},
		{"negative keepalive", Network{Keepalive: -time.Second}, "postgres.keepalive: -1s is negative"},
		{"sub-millisecond user timeout", Network{TCPUserTimeout: 1500 * time.Microsecond}, "postgres.tcp_user_timeout: 1.5ms is finer than a millisecond"},
		{"every problem at once", Network{ConnectTimeout: -1, QueryTimeout: -1}, "postgres.query_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.n
			n.SetDefaults()
			err := n.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("valid network settings refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestApply dials a local listener through the dialer Apply installs and
// reads back the socket options the kernel holds. The server's side of
// the socket is set in the startup packet of a replication connection,
// and once connected for any other (which PgBouncer lets in); integration
// tests read them back from the server.
func TestApply(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://u@localhost/db?tcp_keepalives_idle=99")
	if err != nil {
		t.Fatal(err)
	}
	ordinary := cfg.Copy()
	Network{Keepalive: 7 * time.Second, TCPUserTimeout: 12 * time.Second}.Apply(ordinary)
	for _, k := range []string{"tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"} {
		if v, set := ordinary.RuntimeParams[k]; set {
			t.Errorf("ordinary connection: runtime parameter %s = %q in the startup packet, which PgBouncer refuses", k, v)
		}
	}
	if ordinary.RuntimeParams["tcp_keepalives_idle"] != "99" || ordinary.AfterConnect == nil {
		t.Errorf("ordinary connection: the connection string's tcp_keepalives_idle is %q (want 99), AfterConnect set %v (want true)",
			ordinary.RuntimeParams["tcp_keepalives_idle"], ordinary.AfterConnect != nil)
	}
	cfg.RuntimeParams["replication"] = "database"
	Network{Keepalive: 7 * time.Second, TCPUserTimeout: 12 * time.Second}.Apply(cfg)
	if cfg.ConnectTimeout != 10*time.Second {
		t.Errorf("connect timeout %s, want the default 10s", cfg.ConnectTimeout)
	}
	for k, want := range map[string]string{
		"tcp_keepalives_idle":     "99", // the connection string's own wins
		"tcp_keepalives_interval": "7",
		"tcp_keepalives_count":    "3",
		"tcp_user_timeout":        "12000",
	} {
		if got := cfg.RuntimeParams[k]; got != want {
			t.Errorf("replication connection: runtime parameter %s = %q, want %q", k, got, want)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("cannot listen on loopback: %v", err)
	}
	defer ln.Close()
	c, err := cfg.DialFunc(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if runtime.GOOS != "linux" {
		return
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var idle, user, keep int
	var serr error
	_ = raw.Control(func(fd uintptr) {
		if keep, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); serr != nil {
			return
		}
		if idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE); serr != nil {
			return
		}
		user, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
	if serr != nil {
		t.Fatal(serr)
	}
	if keep != 1 || idle != 7 || user != 12000 {
		t.Errorf("socket: SO_KEEPALIVE %d, TCP_KEEPIDLE %ds, TCP_USER_TIMEOUT %dms; want 1, 7s, 12000ms", keep, idle, user)
	}
}
