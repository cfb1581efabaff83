// Package pgsql holds what outboxrelay's PostgreSQL sources share about
// talking to the server: how a configured table name splits into schema
// and table, which errors no reconnect can fix (with connection strings
// kept out of their messages, secret.RedactError); the network bounds
// (network.go) that keep a silent connection from stalling a source; one
// way to open and close a connection with them (connect.go); and the
// catalog's facts (catalog.go) with their verdicts (verdicts.go), the
// advice the CDC source's setup, `outboxrelay check` and `outboxrelay
// init` all give.
package pgsql

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// SplitTable splits "schema.table" (or "table", in schema public) into its
// parts. Names are taken as written, case and all; quote neither part.
// What PostgreSQL would not keep of each part is pgident.Check's to say,
// with the key it came from.
func SplitTable(name string) (schema, table string, err error) {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = "public", name
	}
	if schema == "" || table == "" || strings.Contains(table, ".") {
		return "", "", fmt.Errorf("outbox.table: %q is not schema.table (two names, neither empty)", name)
	}
	return schema, table, nil
}

// Classify wraps err with what was being done, redacted, and marks it
// [connector.Permanent] when its SQLSTATE is one of hints, whose value is
// added to the message as the fix.
func Classify(what string, err error, hints map[string]string) error {
	if err == nil {
		return nil
	}
	err = secret.RedactError(err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if hint, ok := hints[pe.Code]; ok {
			return connector.Permanent(fmt.Errorf("%s: %w (%s)", what, err, hint))
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// WALEnd is SQL for where the server's WAL has reached: the insert
// position, which a commit has reached when it returns (the written one
// trails it by up to wal_writer_delay under synchronous_commit off), or on
// a standby, which has none, the replayed position.
const WALEnd = "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)"

// SSLMode is the sslmode conn asks for: its own (URL or keyword/value),
// else PGSSLMODE, else libpq's default, prefer.
func SSLMode(conn string) string {
	mode := os.Getenv("PGSSLMODE")
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		if u, err := url.Parse(conn); err == nil && u.Query().Get("sslmode") != "" {
			mode = u.Query().Get("sslmode")
		}
	} else if m := keywordSSLMode.FindStringSubmatch(conn); m != nil {
		mode = strings.Trim(m[2], "'")
	}
	if mode == "" {
		mode = "prefer"
	}
	return mode
}

var keywordSSLMode = regexp.MustCompile(`(^|\s)sslmode\s*=\s*('[^']*'|\S+)`)

// IsLocal reports whether host is this machine: a Unix socket directory,
// localhost or a loopback address, to which plaintext crosses no network.
func IsLocal(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PlaintextHosts are the hosts of conn that are not this machine and that
// a connection may reach unencrypted: with sslmode disable or allow, which
// try plaintext first, or prefer, libpq's default, which falls back to it
// when the server offers no TLS (or an attacker between says so). The
// driver's own reading decides: a host whose attempts (pgconn's config and
// its fallbacks) include one without TLS. None when conn does not parse;
// the source reports that.
func PlaintextHosts(conn string) []string {
	pc, err := pgconn.ParseConfig(conn)
	if err != nil {
		return nil
	}
	var hosts []string
	attempt := func(host string, tls bool) {
		if !tls && !IsLocal(host) && !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	attempt(pc.Host, pc.TLSConfig != nil)
	for _, f := range pc.Fallbacks {
		attempt(f.Host, f.TLSConfig != nil)
	}
	return hosts
}
