package poller

import (
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// SQLSTATEs after which reconnecting cannot help until someone changes the
// server, the schema or the configuration.
var permanentStates = map[string]string{
	pgerrcode.InvalidAuthorizationSpecification: "the role may not connect (check the role and pg_hba.conf)",
	pgerrcode.InvalidPassword:                   "the password was rejected",
	pgerrcode.InvalidCatalogName:                "the database does not exist",
	pgerrcode.InsufficientPrivilege:             "the role lacks a privilege it needs: SELECT and UPDATE (mark) or DELETE on the outbox table, INSERT on the dead-letter table",
	pgerrcode.UndefinedTable:                    "a table does not exist: apply the SQL of `outboxrelay poll-ddl`",
	pgerrcode.UndefinedColumn:                   "a column does not exist: apply the SQL of `outboxrelay poll-ddl`",
	pgerrcode.UndefinedFunction:                 "a function or operator does not exist for a column's type (is poll.order_column orderable?)",
}

// classify marks errors that no reconnect can fix as permanent, with a hint
// for the SQLSTATE.
func classify(what string, err error) error { return pgsql.Classify(what, err, permanentStates) }

// isLockTimeout reports a lock_timeout: another session holds a row lock.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerrcode.LockNotAvailable
}
