package pgsql

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// ConnectFailure is what a failed connection to PostgreSQL comes to, for
// a person: the server it was for, the cause without the driver's
// wrapping, and what to do.
type ConnectFailure struct {
	// Addr is the server: host:port, or the socket's directory.
	Addr string
	// User is the role the connection was for.
	User string
	// Cause is the server's refusal (its message and SQLSTATE), or the
	// network's error, or else the driver's error as it is.
	Cause string
	// Refused: the server answered, and refused the role.
	Refused bool
	// Fix says what to change.
	Fix string
}

// ExplainConnect explains err when it is a failure to connect (a
// *pgconn.ConnectError), and reports whether it was one.
func ExplainConnect(err error) (ConnectFailure, bool) {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Config == nil {
		return ConnectFailure{}, false
	}
	timeout := ce.Config.ConnectTimeout
	f := ConnectFailure{Addr: HostPort(ce.Config), User: ce.Config.User, Fix: ConnectFix(err, ce.Config, timeout)}
	var pe *pgconn.PgError
	var op *net.OpError
	switch {
	case errors.As(err, &pe):
		f.Cause, f.Refused = fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code), true
	case errors.As(err, &op):
		f.Cause = op.Error()
	case errors.Is(err, context.DeadlineExceeded):
		f.Cause = fmt.Sprintf("no answer within %s", timeout)
	default:
		// The driver's text, one attempt per line: on one line.
		f.Cause = strings.Join(strings.Fields(ce.Unwrap().Error()), " ")
	}
	return f, true
}

// ConnectFailed is err, when it is a connection to the server that
// failed, as the [connector.ConnectError] that names the server and the
// role, the server's refusal or the network's error, and what to do
// (ConnectFix, the hints outboxrelay check gives), permanent when err is:
// a password refused stays refused, a server down may come back. Other
// errors are returned as they are, and so is a refusal at startup
// (SQLSTATE 08P01), which a connection pooler gives and the CDC source
// explains.
func ConnectFailed(err error) error {
	f, ok := ExplainConnect(err)
	if !ok || RefusedAtStartup(err) {
		return err
	}
	why := fmt.Errorf("%s; %s", f.Cause, f.Fix)
	if f.Refused {
		why = fmt.Errorf("the server refused role %q: %s; %s", f.User, f.Cause, f.Fix)
	}
	ce := &connector.ConnectError{Service: "PostgreSQL", Addr: f.Addr, Err: why}
	if connector.IsPermanent(err) {
		return connector.Permanent(ce)
	}
	return ce
}

// ConnectFix says what to do about err, a failed connection to the server
// cfg names (a replication connection when cfg asks for one); timeout is
// how long the attempt had.
func ConnectFix(err error, cfg *pgconn.Config, timeout time.Duration) string {
	var pe *pgconn.PgError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var netErr net.Error
	switch {
	case errors.As(err, &pe):
		return serverRefusalFix(pe, cfg)
	case errors.As(err, &unknownCA):
		return "the server's certificate is not signed by a CA you trust: set sslrootcert=<CA file> in postgres.url"
	case errors.As(err, &hostname):
		return fmt.Sprintf("the server's certificate is not valid for %q: connect by a name it carries (sslmode=verify-full checks it)", hostname.Host)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens at %s: check the host and port in postgres.url, and that PostgreSQL is running and listens there (listen_addresses)", HostPort(cfg))
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer from %s within %s: check the host, the port and the firewalls between", HostPort(cfg), timeout)
	}
	return "check postgres.url (host, port, user, database, sslmode) and the server's log"
}

// serverRefusalFix is ConnectFix for a connection the server refused.
func serverRefusalFix(pe *pgconn.PgError, cfg *pgconn.Config) string {
	replication := cfg.RuntimeParams["replication"] != ""
	switch pe.Code {
	case pgerrcode.InvalidPassword:
		return fmt.Sprintf("the password of role %q was refused: check it in postgres.url, postgres.password_file or PGPASSWORD", cfg.User)
	case pgerrcode.InvalidAuthorizationSpecification:
		if replication {
			return fmt.Sprintf("the server does not let role %q open a replication connection from here: add a pg_hba.conf line for it (host replication %s ... scram-sha-256)", cfg.User, cfg.User)
		}
		return fmt.Sprintf("the server does not let role %q in from here: add a pg_hba.conf line for it (host ... scram-sha-256), or ALTER ROLE ... LOGIN", cfg.User)
	case pgerrcode.InsufficientPrivilege:
		if replication {
			// "must be superuser or replication role to start walsender"
			v := Facts{User: cfg.User}.ReplicationRole()
			return v.Detail + ": " + v.Fix
		}
		return fmt.Sprintf("role %q may not connect to database %q: as its owner, GRANT CONNECT ON DATABASE to the role", cfg.User, cfg.Database)
	case pgerrcode.InvalidCatalogName:
		return fmt.Sprintf("database %q does not exist: create it, or fix the database in postgres.url", cfg.Database)
	case pgerrcode.TooManyConnections:
		return "the server has no connection slots left: raise max_connections or close idle connections"
	}
	return fmt.Sprintf("the server refused the connection (SQLSTATE %s): see its log", pe.Code)
}
