package cdc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestHeartbeatMovesIdleSlot runs the source on a server of its own with an
// idle outbox table, as a role with no more than `outboxrelay init` grants,
// and the heartbeat on. First nothing at all writes: only the heartbeat
// can move the slot past the position the server had, and a second slot
// (test_decoding, which shows logical messages) sees its messages. Then
// another database writes WAL: the slot follows it, so the idle outbox
// does not hold that WAL back.
func TestHeartbeatMovesIdleSlot(t *testing.T) {
	srv := testenv.PostgresServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	appURL, err := srv.CreateDatabase(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	otherURL, err := srv.CreateDatabase(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	admin := connect(ctx, t, appURL)
	exec(ctx, t, admin,
		createOutbox,
		`CREATE PUBLICATION relay_pub FOR TABLE outbox WITH (publish = 'insert')`,
		`CREATE ROLE relay LOGIN REPLICATION`,
		`GRANT SELECT ON outbox TO relay`,
		// Only to see the heartbeat's messages; the relay does not need it.
		`SELECT pg_create_logical_replication_slot('watch', 'test_decoding')`,
	)
	other := connect(ctx, t, otherURL)
	exec(ctx, t, other, `CREATE TABLE busy (n int, pad text)`)

	relayURL := strings.Replace(appURL, "postgres@", "relay@", 1)
	var logs syncBuffer
	src, err := cdc.New(cdc.Config{
		URL: relayURL, Table: "public.outbox", Slot: "relay_slot", Publication: "relay_pub",
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
	}, cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan connector.Batch)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx, out) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	}()
	go func() {
		for b := range out {
			t.Errorf("the idle outbox produced a batch of %d events", len(b.Events))
			if b.Done != nil {
				b.Done(nil)
			}
		}
	}()
	defer close(out)

	// Wait for the slot to be streaming, then take the server's position.
	waitFor(ctx, t, "the slot to become active", func() bool {
		var active bool
		err := admin.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = 'relay_slot'`).Scan(&active)
		return err == nil && active
	})
	idleAt := currentLSN(ctx, t, admin)
	waitFor(ctx, t, "confirmed_flush_lsn to pass "+idleAt.String()+" on an idle server", func() bool {
		return confirmed(ctx, t, admin) > idleAt
	})
	var beats int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_changes('watch', NULL, NULL) WHERE data LIKE '%outboxrelay-heartbeat%'`).Scan(&beats); err != nil {
		t.Fatal(err)
	}
	if beats == 0 {
		t.Fatal("the test_decoding slot saw no heartbeat message")
	}
	var app string
	if err := admin.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE usename = 'relay' AND application_name = 'outboxrelay-heartbeat'`).Scan(&app); err != nil {
		t.Fatalf("no heartbeat connection named outboxrelay-heartbeat in pg_stat_activity: %v", err)
	}

	// Another database fills WAL; the idle slot keeps up with it.
	exec(ctx, t, other, `INSERT INTO busy SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g`)
	busyAt := currentLSN(ctx, t, admin)
	waitFor(ctx, t, "confirmed_flush_lsn to pass "+busyAt.String()+" after writes to another database", func() bool {
		return confirmed(ctx, t, admin) >= busyAt
	})
	if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot('watch')`); err != nil {
		t.Fatal(err)
	}

	// A heartbeat that fails is logged, once, with what to do, and the
	// source goes on.
	// Every overload of the text variant: PostgreSQL 17 added a fourth
	// argument (flush, default false), which the relay's three-argument
	// call resolves to.
	exec(ctx, t, admin, `DO $$
		DECLARE f regprocedure;
		BEGIN
			FOR f IN SELECT oid::regprocedure FROM pg_proc WHERE proname = 'pg_logical_emit_message' LOOP
				EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
			END LOOP;
		END $$`)
	waitFor(ctx, t, "the heartbeat's failure to be logged", func() bool { return strings.Contains(logs.String(), "heartbeat failed") })
	time.Sleep(500 * time.Millisecond) // five more failed beats
	if n := strings.Count(logs.String(), "heartbeat failed"); n != 1 {
		t.Errorf("the failing heartbeat was logged %d times; want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "permission denied for function pg_logical_emit_message") || !strings.Contains(logs.String(), "outboxrelay init") {
		t.Errorf("the log does not say what failed and where the grants are:\n%s", logs.String())
	}
	select {
	case err := <-done:
		t.Fatalf("the source stopped when its heartbeat failed: %v", err)
	default:
	}
}

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// createOutbox creates the Debezium-shaped outbox table the tests of
// this package stream from.
const createOutbox = `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb)`

// insertEvent commits an event of aggregate id, alone in its transaction,
// to the createOutbox table.
func insertEvent(ctx context.Context, t *testing.T, conn *pgx.Conn, id string) {
	t.Helper()
	if _, err := conn.Exec(ctx, `INSERT INTO outbox VALUES (gen_random_uuid(), 'order', $1, 'created', '{}')`, id); err != nil {
		t.Fatalf("insert the event of aggregate %s: %v", id, err)
	}
}

// backlogAge is how long the tests let committed transactions wait before
// a source reads them, so that they are a backlog: well over the source's
// 500 ms (cdc/coalesce.go, coalesceLag).
const backlogAge = 800 * time.Millisecond

func exec(ctx context.Context, t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func currentLSN(ctx context.Context, t *testing.T, conn *pgx.Conn) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func confirmed(ctx context.Context, t *testing.T, conn *pgx.Conn) pglogrepl.LSN {
	t.Helper()
	var s *string
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'relay_slot'`).Scan(&s)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if s == nil {
		return 0
	}
	lsn, _ := pglogrepl.ParseLSN(*s)
	return lsn
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestHeartbeatQuery runs cdc.heartbeat_query, Debezium's
// heartbeat.action.query, at every heartbeat: the rows it inserts grow in
// number. A query that fails is logged at ERROR with its SQLSTATE, once,
// the source goes on, and once the table it writes to is back the rows
// grow again.
func TestHeartbeatQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	exec(ctx, t, admin,
		createOutbox,
		`CREATE TABLE hb (at timestamptz NOT NULL, n int)`)
	var logs syncBuffer
	slot := "hbq_slot"
	src, err := cdc.New(cdc.Config{
		URL: url, Table: "public.outbox", Slot: slot, Publication: "hbq_pub",
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		// Two statements: one implicit transaction, as Debezium's JDBC
		// execute and commit.
		HeartbeatQuery: `INSERT INTO hb VALUES (now(), 1); INSERT INTO hb VALUES (now(), 2)`,
	}, cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan connector.Batch)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx, out) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	}()
	go func() {
		for b := range out {
			if b.Done != nil {
				b.Done(nil)
			}
		}
	}()
	defer close(out)
	count := func() (rows, pairs int) {
		if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n = 2) FROM hb`).Scan(&rows, &pairs); err != nil {
			t.Fatal(err)
		}
		return rows, pairs
	}
	waitFor(ctx, t, "the heartbeat query to insert rows", func() bool { n, _ := count(); return n >= 6 })
	first, _ := count()
	waitFor(ctx, t, "the rows to keep growing", func() bool { n, _ := count(); return n > first+4 })
	if n, pairs := count(); n != 2*pairs {
		t.Errorf("hb has %d rows, %d of them second statements: both statements run at every heartbeat", n, pairs)
	}

	exec(ctx, t, admin, `ALTER TABLE hb RENAME TO hb_away`)
	waitFor(ctx, t, "the failing query to be logged", func() bool { return strings.Contains(logs.String(), "cdc.heartbeat_query failed") })
	time.Sleep(500 * time.Millisecond) // five more failed beats
	if n := strings.Count(logs.String(), "cdc.heartbeat_query failed"); n != 1 {
		t.Errorf("the failing query was logged %d times; want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "sqlstate=42P01") {
		t.Errorf("the failure is not an ERROR naming its SQLSTATE (42P01, undefined_table):\n%s", logs.String())
	}
	select {
	case err := <-done:
		t.Fatalf("the source stopped when its heartbeat query failed: %v", err)
	default:
	}
	exec(ctx, t, admin, `ALTER TABLE hb_away RENAME TO hb`)
	before, _ := count()
	waitFor(ctx, t, "the rows to grow again", func() bool { n, _ := count(); return n > before+2 })
	waitFor(ctx, t, "the recovery to be logged", func() bool { return strings.Contains(logs.String(), "cdc.heartbeat_query works again") })
}
