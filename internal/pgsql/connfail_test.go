package pgsql

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestExplainConnect: a connection nothing answers is explained as the
// network's error at the server's address, with what to check; an error
// that is no failed connection is not explained.
func TestExplainConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, "postgres://relay@"+addr+"/app?sslmode=disable&connect_timeout=5")
	f, ok := ExplainConnect(err)
	if !ok {
		t.Fatalf("ExplainConnect(%v) did not take it for a failed connection", err)
	}
	if f.Addr != addr || f.User != "relay" || f.Refused || !strings.Contains(f.Cause, "connection refused") || strings.Contains(f.Cause, "\n") ||
		!strings.HasPrefix(f.Fix, "nothing listens at "+addr) {
		t.Errorf("ExplainConnect = %+v", f)
	}
	if _, ok := ExplainConnect(context.Canceled); ok {
		t.Error("ExplainConnect took context.Canceled for a failed connection")
	}
}

// TestConnectFix: each refusal a server sends at connect gets its fix; a
// privilege refused on a replication connection is the REPLICATION
// attribute, on an ordinary one the CONNECT privilege.
func TestConnectFix(t *testing.T) {
	ordinary := &pgconn.Config{Host: "db", Port: 5432, User: "relay", Database: "app", RuntimeParams: map[string]string{}}
	replication := &pgconn.Config{Host: "db", Port: 5432, User: "relay", Database: "app", RuntimeParams: map[string]string{"replication": "database"}}
	for _, tc := range []struct {
		code string
		cfg  *pgconn.Config
		want string
	}{
		{"28P01", ordinary, `the password of role "relay" was refused`},
		{"28000", ordinary, "add a pg_hba.conf line for it (host ... scram-sha-256)"},
		{"28000", replication, "(host replication relay ... scram-sha-256)"},
		{"42501", replication, `role "relay" lacks the REPLICATION attribute that reading a replication slot needs: as a superuser: ALTER ROLE "relay" REPLICATION;`},
		{"42501", ordinary, `GRANT CONNECT ON DATABASE`},
		{"3D000", ordinary, `database "app" does not exist`},
		{"53300", ordinary, "no connection slots left"},
		{"XX000", ordinary, "SQLSTATE XX000"},
	} {
		if got := ConnectFix(&pgconn.PgError{Code: tc.code}, tc.cfg, time.Second); !strings.Contains(got, tc.want) {
			t.Errorf("%s, replication %t: %q; want it to say %q", tc.code, tc.cfg.RuntimeParams["replication"] != "", got, tc.want)
		}
	}
}
