package secret

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRedactErrorSaysWhatIsWrong keeps pgconn's account of a bad connection
// string and drops the string: a port out of range, which pgconn reports
// with no cause, used to come out as "cannot parse the connection string:
// <nil>".
func TestRedactErrorSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ name, conn, want string }{
		{"URL port out of range", "postgres://relay:hunter2@db:99999/app", "cannot parse the connection string: invalid port"},
		{"key=value port out of range", "host=db port=99999 password=hunter2", "cannot parse the connection string: invalid port"},
		{"port not a number", "postgres://relay:hunter2@db:abc/app", "cannot parse the connection string: invalid port"},
		{"space in a URL's password", "postgres://relay:hun ter2@db/app", "failed to parse as URL (unexpected spaces found in password"},
		{"bad sslmode", "postgres://relay:hunter2@db/app?sslmode=bogus", "cannot parse the connection string: failed to configure TLS (sslmode is invalid)"},
		{"password that looks like the separator", "host=db port=99999 password='hun`: ter2'", "cannot parse the connection string: invalid port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgconn.ParseConfig(tc.conn)
			if err == nil {
				t.Fatalf("%q parsed", tc.conn)
			}
			got := RedactError(err).Error()
			if !strings.Contains(got, tc.want) || strings.Contains(got, "<nil>") {
				t.Errorf("RedactError = %q, want it to say %q", got, tc.want)
			}
			if strings.Contains(got, "hunter2") || strings.Contains(got, "ter2") || strings.Contains(got, "db") {
				t.Errorf("RedactError = %q shows the connection string", got)
			}
		})
	}
}
