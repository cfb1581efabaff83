package config

import (
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// TestDebeziumRouterKeepsPostgresNetwork gives the router's own connection,
// which reads the outbox table's column types, the postgres.* bounds of
// every other PostgreSQL connection.
func TestDebeziumRouterKeepsPostgresNetwork(t *testing.T) {
	c, err := Load(writeFile(t, "postgres:\n  url: postgres://relay@db/app\n  connect_timeout: 2s\n  keepalive: 5s\n  tcp_user_timeout: 20s\n  query_timeout: 7s\nkafka:\n  brokers: [k:9092]\nrouting:\n  value_format: json\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := pgsql.Network{ConnectTimeout: 2 * time.Second, Keepalive: 5 * time.Second, TCPUserTimeout: 20 * time.Second, QueryTimeout: 7 * time.Second}
	if got := c.DebeziumRouter().Network; got != want {
		t.Errorf("router network %+v, want %+v", got, want)
	}
}
