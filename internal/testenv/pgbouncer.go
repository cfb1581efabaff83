package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PgBouncer starts a PgBouncer in front of the server of dbURL (a URL
// Postgres returned), pooling in poolMode (session, transaction or
// statement), and returns dbURL with the pooler's address in place of the
// server's; t.Cleanup stops it. Every database name and user reaches the
// server as dbURL's user (auth_type any), with dbURL's password. The test
// is skipped when pgbouncer is not installed (Debian: apt-get install
// pgbouncer; scripts/test installs it). Run as root, PgBouncer (which
// refuses root) runs as the OS user postgres, as the server does.
func PgBouncer(t testing.TB, dbURL, poolMode string) string {
	t.Helper()
	bin := pgbouncerBinary()
	if bin == "" {
		t.Skip("pgbouncer is not installed (Debian: apt-get install pgbouncer; scripts/test does it)")
	}
	server, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("testenv: pgbouncer: parse %q: %v", dbURL, err)
	}
	cred, err := bouncerCredential()
	if err != nil {
		t.Fatalf("testenv: pgbouncer: %v", err)
	}
	dir, err := os.MkdirTemp("", "outboxrelay-pgbouncer-")
	if err != nil {
		t.Fatalf("testenv: pgbouncer: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// The port is picked free and then bound by pgbouncer: another
	// process may take it in between, and pgbouncer then exits; a few
	// tries make that harmless.
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testenv: pgbouncer: %v", err)
		}
		ini := bouncerINI(server, poolMode, port, dir)
		if err := writeOwned(filepath.Join(dir, "pgbouncer.ini"), ini, cred); err != nil {
			t.Fatalf("testenv: pgbouncer: %v", err)
		}
		if err := chown(dir, cred); err != nil {
			t.Fatalf("testenv: pgbouncer: %v", err)
		}
		stop, err := runBouncer(bin, dir, port, cred)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(stop)
		u := *server
		u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		t.Logf("testenv: pgbouncer (%s pooling) on port %d in front of %s", poolMode, port, server.Host)
		return u.String()
	}
	t.Fatalf("testenv: pgbouncer did not start: %v", last)
	return ""
}

func pgbouncerBinary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	// Debian installs it into /usr/sbin, which a user's PATH may lack.
	if fi, err := os.Stat("/usr/sbin/pgbouncer"); err == nil && fi.Mode()&0o111 != 0 {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// bouncerINI is the configuration: every database name to the same name
// on server, logged in as server's user; no Unix socket, log to the
// directory.
func bouncerINI(server *url.URL, poolMode string, port int, dir string) string {
	host, sport := server.Hostname(), server.Port()
	if sport == "" {
		sport = "5432"
	}
	conn := fmt.Sprintf("host=%s port=%s user=%s", host, sport, server.User.Username())
	if pw, ok := server.User.Password(); ok {
		conn += " password=" + pw
	}
	return strings.Join([]string{
		"[databases]",
		"* = " + conn,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = any",
		"pool_mode = " + poolMode,
		"logfile = " + filepath.Join(dir, "pgbouncer.log"),
		"pidfile = " + filepath.Join(dir, "pgbouncer.pid"),
		"max_client_conn = 200",
		"default_pool_size = 40",
		"",
	}, "\n")
}

// runBouncer starts pgbouncer and waits until it accepts connections; the
// returned func stops it.
func runBouncer(bin, dir string, port int, cred *bouncerCred) (func(), error) {
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = bouncerSysProcAttr(cred)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return nil, fmt.Errorf("pgbouncer exited (%v): %s%s", err, out.String(), log)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return stop, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	return nil, errors.New("pgbouncer did not listen within 30s")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func writeOwned(path, content string, cred *bouncerCred) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return chown(path, cred)
}

// BouncerHostPort is the pooler's address in a URL PgBouncer returned.
func BouncerHostPort(t testing.TB, pooledURL string) string {
	t.Helper()
	u, err := url.Parse(pooledURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
