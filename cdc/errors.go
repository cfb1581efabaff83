package cdc

import (
	"github.com/jackc/pgerrcode"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// SQLSTATEs after which reconnecting cannot help until someone changes the
// server or the configuration.
var permanentStates = map[string]string{
	pgerrcode.InvalidAuthorizationSpecification: "the role may not connect or lacks the REPLICATION attribute (ALTER ROLE ... REPLICATION) or a pg_hba.conf entry for replication",
	pgerrcode.InvalidPassword:                   "the password was rejected",
	pgerrcode.InvalidCatalogName:                "the database does not exist",
	pgerrcode.InsufficientPrivilege:             "the role lacks a privilege it needs (see `outboxrelay init` for the grants)",
	pgerrcode.UndefinedTable:                    "the table does not exist",
	pgerrcode.UndefinedObject:                   "the slot or publication does not exist",
	pgerrcode.ObjectNotInPrerequisiteState:      "the server is not set up for logical replication (wal_level = logical)",
	pgerrcode.FeatureNotSupported:               "the server does not support this (PostgreSQL 10 or newer with pgoutput is needed)",
}

// classify marks errors that no reconnect can fix as permanent, with a hint
// for the SQLSTATE.
func classify(what string, err error) error { return pgsql.Classify(what, err, permanentStates) }

// redactErr keeps the connection string out of err.
func redactErr(err error) error { return secret.RedactError(err) }
