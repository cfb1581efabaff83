package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// firstFailureConfig is the relay's configuration with a JSON log, as
// production runs it, reading with source (cdc when empty).
func firstFailureConfig(url, broker, source string) string {
	if source == "" {
		source = "cdc"
	}
	return fmt.Sprintf("source: %s\npostgres:\n  url: %q\nkafka:\n  brokers: [%s]\nlog:\n  level: info\n  format: json\nhttp:\n  listen: 127.0.0.1:0\n", source, url, broker)
}

// relayLine is one record of the relay's JSON log.
type relayLine struct {
	Level, Msg, Addr, Err string
	RetryIn               string `json:"retry_in"`
}

// logLines reads the relay's JSON log, leaving out its two start lines,
// which every run prints.
func relayLog(t *testing.T, out string) []relayLine {
	t.Helper()
	var lines []relayLine
	// Whole lines only: the relay may be writing the last one.
	out = out[:strings.LastIndexByte(out, '\n')+1]
	for l := range strings.Lines(out) {
		var rec relayLine
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a line that is not JSON: %q", l)
		}
		if rec.Msg != "outboxrelay starting" && rec.Msg != "serving /metrics, /healthz and /readyz" {
			lines = append(lines, rec)
		}
	}
	return lines
}

// closedPort is an address on this host where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestFirstFailures: what a user reads when the relay's first connection
// fails, in the JSON log of the built binary. A password refused, a role
// without REPLICATION and wal_level=replica stop the relay with one ERROR
// that names the server, the role and the fix, and no line says a
// connection was lost or events dropped, since none was ever made. An
// unreachable broker or server is one WARN per backoff step naming Kafka
// or PostgreSQL and the address, and nothing else. The polling source
// says the same of a refused password and an unreachable server.
func TestFirstFailures(t *testing.T) {
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	url, err := srv.CreateDatabase(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	for _, sql := range []string{
		`CREATE ROLE relay LOGIN REPLICATION PASSWORD 'right'`,
		`CREATE ROLE norepl LOGIN`,
		`GRANT SELECT ON outbox TO relay, norepl`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// The test server trusts every local connection; role relay must give
	// its password.
	hba := filepath.Join(srv.Dir(), "data", "pg_hba.conf")
	trust, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("host all relay 127.0.0.1/32 scram-sha-256\nhost replication relay 127.0.0.1/32 scram-sha-256\n"), trust...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	server := fmt.Sprintf("127.0.0.1:%d", cfg.Port)
	as := func(role, password string) string {
		return fmt.Sprintf("postgres://%s:%s@%s/app?sslmode=disable", role, password, server)
	}
	_, brokers := testenv.Kafka(t)

	refused := `cannot connect to PostgreSQL at ` + server + `: the server refused role "relay": password authentication failed for user "relay" (SQLSTATE 28P01); the password of role "relay" was refused: check it in postgres.url, postgres.password_file or PGPASSWORD`
	for _, tc := range []struct {
		name, url, source string
		// before are the messages logged before the stop's.
		before []string
		err    string
	}{
		{"password refused", as("relay", "wrong"), "", nil, refused},
		{"password refused, polling", as("relay", "wrong"), "poll", nil, refused},
		{"role without REPLICATION", as("norepl", "x"), "", nil,
			`cannot connect to PostgreSQL at ` + server + `: the server refused role "norepl": must be superuser or replication role to start walsender (SQLSTATE 42501); role "norepl" lacks the REPLICATION attribute that reading a replication slot needs: as a superuser: ALTER ROLE "norepl" REPLICATION; (Amazon RDS: GRANT rds_replication TO "norepl";)`},
		{"wal_level replica", "", "", []string{"created checkpoint topic"},
			`wal_level is "replica"; logical replication needs "logical": as a superuser: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (on a managed service, set the parameter in its console: rds.logical_replication = 1 on Amazon RDS, cloudsql.logical_decoding = on on Cloud SQL, wal_level = logical on Azure); or use source: poll`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if url == "" {
				replica := testenv.PostgresServerWith(t, map[string]string{"wal_level": "replica"})
				var err error
				if url, err = replica.CreateDatabase(ctx, "app"); err != nil {
					t.Fatal(err)
				}
				createOutbox(t, connectPool(t, url), "outbox")
			}
			p := runBinary(t, firstFailureConfig(url, brokers[0], tc.source))
			if code := p.exit(t, time.Minute); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			lines := relayLog(t, p.out.String())
			var msgs []string
			for _, l := range lines {
				msgs = append(msgs, l.Level+" "+l.Msg)
			}
			want := []string{}
			for _, m := range tc.before {
				want = append(want, "INFO "+m)
			}
			want = append(want, "ERROR outboxrelay stopped")
			if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
				t.Errorf("the log says:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
			}
			if got := lines[len(lines)-1].Err; got != tc.err {
				t.Errorf("the relay stopped with\n%s\nwant\n%s", got, tc.err)
			}
		})
	}

	unreachable := "dial tcp %[1]s: connect: connection refused; nothing listens at %[1]s: check the host and port in postgres.url, and that PostgreSQL is running and listens there (listen_addresses)"
	for _, tc := range []struct {
		name, url, broker, source, msg, err string
	}{
		{name: "broker unreachable", url: url, msg: "cannot connect to Kafka; retrying", err: "dial tcp %s: connect: connection refused"},
		{name: "server unreachable", broker: brokers[0], msg: "cannot connect to PostgreSQL; retrying", err: unreachable},
		{name: "server unreachable, polling", broker: brokers[0], source: "poll", msg: "cannot connect to PostgreSQL; retrying", err: unreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := closedPort(t)
			if tc.broker == "" {
				tc.broker = addr
			}
			if tc.url == "" {
				tc.url = "postgres://relay@" + addr + "/app?sslmode=disable"
			}
			p := runBinary(t, firstFailureConfig(tc.url, tc.broker, tc.source))
			deadline := time.Now().Add(time.Minute)
			for len(relayLog(t, p.out.String())) < 4 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			lines := relayLog(t, p.out.String())
			if len(lines) < 4 {
				t.Fatalf("%d lines within a minute, want a retry a line", len(lines))
			}
			for _, l := range lines {
				if l.Level != "WARN" || l.Msg != tc.msg || l.Addr != addr || l.Err != fmt.Sprintf(tc.err, addr) || l.RetryIn == "" {
					t.Errorf("a line %+v; want each one WARN %q, addr %s, err %q and retry_in", l, tc.msg, addr, fmt.Sprintf(tc.err, addr))
				}
			}
		})
	}
}
