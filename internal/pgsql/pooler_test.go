package pgsql

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

func TestPoolingOf(t *testing.T) {
	for _, tc := range []struct {
		name         string
		a1, held, a2 uint32
		want         Pooling
	}{
		{"a keeps its session, b has another: session pooling", 10, 11, 10, SessionPooling},
		{"b's transaction took a's idle session", 10, 10, 11, TransactionPooling},
		{"a moved while b held a session", 10, 12, 11, TransactionPooling},
		{"b took a's session and a got it back afterwards", 10, 10, 10, TransactionPooling},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := poolingOf(tc.a1, tc.held, tc.a2); got != tc.want {
				t.Errorf("poolingOf(%d, %d, %d) = %s, want %s", tc.a1, tc.held, tc.a2, got, tc.want)
			}
		})
	}
}

func TestPoolingVerdicts(t *testing.T) {
	const at = "db.example:6432"
	for _, tc := range []struct {
		name        string
		verdict     Verdict
		level       Level
		detail, fix []string
	}{
		{"poller direct", Direct.PollerVerdict(at), OK, []string{"directly"}, nil},
		{"poller session pooling", SessionPooling.PollerVerdict(at), OK, []string{at, "session pooling"}, nil},
		{"poller transaction pooling", TransactionPooling.PollerVerdict(at), Fail,
			[]string{at, "transaction pooling mode", "advisory locks", "LISTEN"}, []string{"pool_mode=session", "PostgreSQL itself"}},
		{"poller statement pooling", StatementPooling.PollerVerdict(at), Fail, []string{"statement pooling mode"}, []string{"pool_mode=session"}},
		{"replication direct", Direct.ReplicationVerdict(at), OK, []string{"directly"}, nil},
		{"replication through session pooling", SessionPooling.ReplicationVerdict(at), Fail,
			[]string{at, "connection pooler", "replication"}, []string{"PostgreSQL server's own host and port"}},
		{"replication through transaction pooling", TransactionPooling.ReplicationVerdict(at), Fail, []string{at}, []string{"own host and port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.verdict
			if v.Level != tc.level {
				t.Fatalf("level %d, want %d: %+v", v.Level, tc.level, v)
			}
			for _, s := range tc.detail {
				if !strings.Contains(v.Detail, s) {
					t.Errorf("detail %q lacks %q", v.Detail, s)
				}
			}
			for _, s := range tc.fix {
				if !strings.Contains(v.Fix, s) {
					t.Errorf("fix %q lacks %q", v.Fix, s)
				}
			}
			if (v.Err() != nil) != (tc.level == Fail) || (v.Err() != nil && !connector.IsPermanent(v.Err())) {
				t.Errorf("Err() = %v for level %d; a failure must be a permanent error", v.Err(), v.Level)
			}
		})
	}
}

func TestErrPooledReplication(t *testing.T) {
	refusal := &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: replication"}
	err := ErrPooledReplication("127.0.0.1:6432", refusal)
	if !connector.IsPermanent(err) {
		t.Errorf("not permanent: %v", err)
	}
	if !errors.Is(err, refusal) {
		t.Errorf("the pooler's refusal is not wrapped: %v", err)
	}
	for _, s := range []string{"127.0.0.1:6432", "connection pooler", "own host and port", "unsupported startup parameter: replication"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	if !RefusedAtStartup(refusal) || RefusedAtStartup(&pgconn.PgError{Code: "28000"}) || RefusedAtStartup(errors.New("eof")) {
		t.Error("RefusedAtStartup should hold for SQLSTATE 08P01 only")
	}
}
