package debezium

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The router's own connection, which reads the outbox table's column
// types, keeps postgres.connect_timeout as every other connection does: a
// PostgreSQL that accepts and never answers (behind a load balancer with no
// backend, or overloaded) fails the read within it, and the relay goes on
// to read the types with the first event, instead of waiting 30 seconds.
func TestCheckKeepsConnectTimeoutWhenPostgresDoesNotAnswer(t *testing.T) {
	addr := testenv.SilentServer(t)

	r, err := NewRouter(RouterConfig{
		PostgresURL: "postgres://relay@" + addr + "/app?sslmode=disable",
		Network:     pgsql.Network{ConnectTimeout: time.Second},
		ValueFormat: FormatJSON,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = r.Check(context.Background())
	took := time.Since(start)
	if err == nil {
		t.Fatal("Check against a PostgreSQL that never answers succeeded")
	}
	if took > 3*time.Second {
		t.Errorf("Check returned after %s, want within about postgres.connect_timeout (1s); err: %v", took.Round(time.Millisecond), err)
	}
	if connector.IsPermanent(err) {
		t.Errorf("Check = %v, permanent; a connection that fails is tried again with the first event", err)
	}
	for _, want := range []string{"read the outbox table's column types", "connect within 1s", "timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %q, want it to say %q", err, want)
		}
	}
}
