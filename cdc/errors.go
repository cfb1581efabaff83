package cdc

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// SQLSTATEs after which reconnecting cannot help until someone changes the
// server or the configuration.
var permanentStates = map[string]string{
	"28000": "the role may not connect or lacks the REPLICATION attribute (ALTER ROLE ... REPLICATION) or a pg_hba.conf entry for replication",
	"28P01": "the password was rejected",
	"3D000": "the database does not exist",
	"42501": "the role lacks a privilege it needs (see `outboxrelay init` for the grants)",
	"42P01": "the table does not exist",
	"42704": "the slot or publication does not exist",
	"55000": "the server is not set up for logical replication (wal_level = logical)",
	"0A000": "the server does not support this (PostgreSQL 10 or newer with pgoutput is needed)",
}

// classify marks errors that no reconnect can fix as permanent, with a hint
// for the SQLSTATE.
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	err = redactErr(err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if hint, ok := permanentStates[pe.Code]; ok {
			return connector.Permanent(fmt.Errorf("%s: %w (%s)", what, err, hint))
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}
