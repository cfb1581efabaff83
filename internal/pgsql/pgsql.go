// Package pgsql holds what outboxrelay's PostgreSQL sources share about
// talking to the server: how a configured table name splits into schema
// and table, which errors no reconnect can fix, and keeping connection
// strings, passwords and all, out of error messages; and the network
// bounds (network.go) that keep a silent connection from stalling a source.
package pgsql

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// CheckName reports a name PostgreSQL cannot hold as written: empty, over
// 63 bytes, or with a NUL.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > 63:
		return fmt.Errorf("%q is %d bytes long; PostgreSQL names are at most 63", name, len(name))
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%q contains a NUL character", name)
	}
	return nil
}

// SplitTable splits "schema.table" (or "table", in schema public) into its
// parts. Names are taken as written, case and all; quote neither part.
func SplitTable(name string) (schema, table string, err error) {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = "public", name
	}
	if CheckName(schema) != nil || CheckName(table) != nil || strings.Contains(table, ".") {
		return "", "", fmt.Errorf("outbox.table: %q is not schema.table (each part 1 to 63 bytes)", name)
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
	err = Redact(err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if hint, ok := hints[pe.Code]; ok {
			return connector.Permanent(fmt.Errorf("%s: %w (%s)", what, err, hint))
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Redact drops the connection string from pgconn's parse errors, which
// quote it, password and all.
func Redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot parse the connection string: %s", parseProblem(pe))
	}
	return err
}

// parseProblem is what pgconn found wrong with a connection string: its
// message less the quoted string. The message is not exported on its own,
// and the cause (Unwrap) is nil for some problems, such as an invalid
// port, so the cause alone said "<nil>". Error is "cannot parse `<string>`:
// <message>[ (<cause>)]", and the message follows the last "`: ", which the
// string itself may hold but pgconn's messages do not.
func parseProblem(pe *pgconn.ParseConfigError) string {
	s := pe.Error()
	if i := strings.LastIndex(s, "`: "); i >= 0 {
		return s[i+len("`: "):]
	}
	if cause := pe.Unwrap(); cause != nil {
		return cause.Error()
	}
	return "not a valid URL or key=value string"
}

// WALEnd is SQL for where the server's WAL has reached: the insert
// position, which a commit has reached when it returns (the written one
// trails it by up to wal_writer_delay under synchronous_commit off), or on
// a standby, which has none, the replayed position.
const WALEnd = "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)"
