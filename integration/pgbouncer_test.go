package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

// Tests against Debian's PgBouncer (1.18 here), started in front of the
// test's database in each pooling mode (testenv.PgBouncer; skipped when
// pgbouncer is not installed).

// TestPgBouncerProbeTellsTheModes: pgsql.ProbePooling tells PostgreSQL
// itself from PgBouncer, and PgBouncer's session, transaction and
// statement pooling apart, as the sources and `outboxrelay check` judge
// them.
func TestPgBouncerProbeTellsTheModes(t *testing.T) {
	url := testenv.Postgres(t)
	for _, tc := range []struct {
		mode string // "" for PostgreSQL itself
		want pgsql.Pooling
	}{
		{"", pgsql.Direct},
		{"session", pgsql.SessionPooling},
		{"transaction", pgsql.TransactionPooling},
		{"statement", pgsql.StatementPooling},
	} {
		name := tc.mode
		if name == "" {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			u := url
			if tc.mode != "" {
				u = testenv.PgBouncer(t, url, tc.mode)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			open := func(ctx context.Context) (*pgconn.PgConn, error) { return pgconn.Connect(ctx, u) }
			conn, err := open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			// Twice: the probe leaves nothing behind that would change
			// its next answer.
			for range 2 {
				got, err := pgsql.ProbePooling(ctx, conn, open)
				if err != nil {
					t.Fatalf("ProbePooling: %v", err)
				}
				if got != tc.want {
					t.Fatalf("ProbePooling = %s, want %s", got, tc.want)
				}
			}
		})
	}
}

// TestPgBouncerSessionSettings: the server's side of the network bounds
// (tcp_user_timeout and the keepalives), which PgBouncer refuses in the
// startup packet, are set once connected, directly and through session
// pooling alike.
func TestPgBouncerSessionSettings(t *testing.T) {
	url := testenv.Postgres(t)
	for name, u := range map[string]string{"direct": url, "session pooling": testenv.PgBouncer(t, url, "session")} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := pgsql.Connect(ctx, u, pgsql.Network{Keepalive: 7 * time.Second, TCPUserTimeout: 12 * time.Second})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer pgsql.Close(ctx, conn)
			var user, idle string
			if err := conn.QueryRow(ctx, `SELECT current_setting('tcp_user_timeout'), current_setting('tcp_keepalives_idle')`).Scan(&user, &idle); err != nil {
				t.Fatal(err)
			}
			if user != "12000" || idle != "7" {
				t.Errorf("tcp_user_timeout %sms, tcp_keepalives_idle %ss; want 12000ms, 7s", user, idle)
			}
		})
	}
}

// pollerVia returns a poller of e's table that connects to url; the DDL
// is applied on the server itself.
func pollerVia(t *testing.T, e *env, url string) *poller.Source {
	t.Helper()
	cfg := poller.Config{URL: e.url, Table: "public." + e.table, Interval: 50 * time.Millisecond, MaxInterval: 500 * time.Millisecond}
	applyPollDDL(t, cfg)
	cfg.URL = url
	src, err := poller.New(cfg, poller.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestPgBouncerPollerRefusesTransactionPooling: a poller whose
// postgres.url leads to PgBouncer in transaction or statement pooling
// stops at once with a permanent error naming the pooler's address, the
// mode, what breaks and the fix (session pooling), before it claims
// anything or sets anything on a pooled server session.
func TestPgBouncerPollerRefusesTransactionPooling(t *testing.T) {
	e := newEnv(t, pollKind)
	workload{table: e.table, writers: 1, aggregates: 2, events: 10}.write(context.Background(), t, e.pool)
	for _, mode := range []string{"transaction", "statement"} {
		t.Run(mode, func(t *testing.T) {
			via := testenv.PgBouncer(t, e.url, mode)
			r := startRelay(t, pollerVia(t, e, via), e.brokers, connector.RunnerConfig{}, sink.Config{})
			err := r.wait(t, time.Minute)
			if !connector.IsPermanent(err) {
				t.Fatalf("relay stopped with %v; want a permanent error", err)
			}
			t.Logf("the relay stopped with: %v", err)
			for _, want := range []string{testenv.BouncerHostPort(t, via), mode + " pooling mode", "advisory locks", "pool_mode=session"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if n := countRows(t, e.pool, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`); n != 0 {
				t.Errorf("%d rows marked published through a %s pooler", n, mode)
			}
		})
	}
}

// TestPgBouncerPollerSessionPooling: behind PgBouncer in session pooling
// the poller runs (it sets lock_timeout and the like once connected,
// which PgBouncer refuses in the startup packet), and every event
// arrives, each aggregate in commit order.
func TestPgBouncerPollerSessionPooling(t *testing.T) {
	e := newEnv(t, pollKind)
	via := testenv.PgBouncer(t, e.url, "session")
	r := startRelay(t, pollerVia(t, e, via), e.brokers, connector.RunnerConfig{}, sink.Config{})
	ctx := context.Background()
	workload{table: e.table, writers: 2, aggregates: 20, events: 2000, txnSize: 5}.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if rep.duplicates != 0 {
		t.Errorf("%d duplicates without any failure", rep.duplicates)
	}
	if n := countRows(t, e.pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 0 {
		t.Errorf("%d rows left unmarked after every event arrived and the relay stopped", n)
	}
}

// TestPgBouncerCDCRefused: Debian's PgBouncer refuses a replication
// connection (1.23 would pass it on, unpooled); the CDC source whose
// postgres.url leads to it, in any pooling mode, stops at once with a
// permanent error naming the pooler's address and the fix (the server's
// own address), not a retry loop on "unsupported startup parameter".
func TestPgBouncerCDCRefused(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			via := testenv.PgBouncer(t, url, mode)
			src := openCDC(t, cdc.Config{URL: via, Table: "public.outbox", Slot: uniqueName(t)})
			r := startRelay(t, src, brokers, connector.RunnerConfig{}, sink.Config{})
			err := r.wait(t, time.Minute)
			if !connector.IsPermanent(err) {
				t.Fatalf("relay stopped with %v; want a permanent error", err)
			}
			t.Logf("the relay stopped with: %v", err)
			for _, want := range []string{testenv.BouncerHostPort(t, via), "connection pooler", "PostgreSQL server's own host and port", "unsupported startup parameter"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
