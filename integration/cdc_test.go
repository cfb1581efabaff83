package integration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestCDCUnrelatedWritesAdvanceSlot: with the outbox idle and other tables
// busy, the slot's confirmed_flush_lsn keeps up with the server, so the
// slot does not hold back WAL.
func TestCDCUnrelatedWritesAdvanceSlot(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `CREATE TABLE other (n int)`); err != nil {
		t.Fatal(err)
	}
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	start := slotConfirmed(ctx, t, e.pool, e.name)
	for i := range 50 {
		if _, err := e.pool.Exec(ctx, `INSERT INTO other SELECT g FROM generate_series(1, 200) g`); err != nil {
			t.Fatal(err)
		}
		_ = i
	}
	var target pglogrepl.LSN
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(lsnScanner{&target}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := slotConfirmed(ctx, t, e.pool, e.name)
		if got >= target {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot confirmed_flush_lsn stayed at %s (started at %s); the server is at %s", got, start, target)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.stop(t)
}

// TestCDCNonInsertChangesDoNotStall uses a publication that publishes every
// operation, as a user's own might. Updates, deletes (including Debezium's
// insert-then-delete in one transaction) and a truncate are skipped and
// counted; every insert is relayed.
func TestCDCNonInsertChangesDoNotStall(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `CREATE PUBLICATION `+pgx.Identifier{e.name}.Sanitize()+` FOR TABLE outbox`); err != nil {
		t.Fatal(err)
	}
	src := openCDC(t, cdc.Config{URL: e.url, Table: "public.outbox", Slot: e.name, Publication: e.name})
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, e.pool, e.name)

	exec := func(sql string) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ins := `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'T', '{"seq": %d}')`
	exec(strings.ReplaceAll(ins, "%d", "1"))
	exec(`UPDATE outbox SET type = 'Changed'`)
	// Debezium's recommended pattern: insert and delete in one transaction.
	exec(`BEGIN; ` + strings.ReplaceAll(ins, "%d", "2") + `; DELETE FROM outbox WHERE payload->>'seq' = '2'; COMMIT`)
	exec(`DELETE FROM outbox`)
	exec(`TRUNCATE outbox`)
	exec(strings.ReplaceAll(ins, "%d", "3"))

	c := newCollector(t, e.brokers, "outbox.event.order")
	deadline := time.Now().Add(30 * time.Second)
	for len(c.recs) < 3 && time.Now().Before(deadline) {
		c.poll(ctx)
	}
	r.stop(t)
	c.settle(200 * time.Millisecond)
	var seqs []string
	for _, rec := range c.recs {
		seqs = append(seqs, string(rec.Value))
	}
	if want := []string{`{"seq": 1}`, `{"seq": 2}`, `{"seq": 3}`}; strings.Join(seqs, " ") != strings.Join(want, " ") {
		t.Fatalf("records %q, want %q", seqs, want)
	}
	// One UPDATE, the DELETE in the transaction, the DELETE of the rest
	// (one row left by then), the TRUNCATE.
	if n := src.SkippedChanges(); n != 4 {
		t.Errorf("skipped %d changes, want 4", n)
	}
}

// TestCDCSetupErrorsAreClear: problems a restart cannot fix stop the relay
// at once with an error that says what to do.
func TestCDCSetupErrorsAreClear(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	name := uniqueName(t)

	for _, tc := range []struct {
		name  string
		setup string
		cfg   cdc.Config
		want  string
	}{
		{name: "no table", cfg: cdc.Config{Table: "public.missing"}, want: "does not exist"},
		{name: "missing column", setup: `CREATE TABLE narrow (id uuid, aggregatetype text)`, cfg: cdc.Config{Table: "public.narrow"}, want: `no column "aggregateid"`},
		// With cdc.create_publication (the default) the relay adds the
		// table itself (TestCDCSeveralTables); without, it says how.
		{name: "publication without the table", setup: `CREATE TABLE t3 (id uuid, aggregatetype text, aggregateid text); CREATE TABLE elsewhere (n int); CREATE PUBLICATION ` + name + `_p FOR TABLE elsewhere`,
			cfg: cdc.Config{Table: "public.t3", Publication: name + "_p", CreatePublication: new(bool)}, want: `does not include table public.t3 and cdc.create_publication is false: ALTER PUBLICATION "` + name + `_p" ADD TABLE "public"."t3"`},
		{name: "publication missing, creation off", setup: `CREATE TABLE t4 (id uuid, aggregatetype text, aggregateid text)`,
			cfg: cdc.Config{Table: "public.t4", Publication: name + "_q", CreatePublication: new(bool)}, want: "CREATE PUBLICATION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != "" {
				if _, err := pool.Exec(ctx, tc.setup); err != nil {
					t.Fatal(err)
				}
			}
			tc.cfg.URL = url
			if tc.cfg.Slot == "" {
				tc.cfg.Slot = uniqueName(t)
			}
			r := startRelay(t, openCDC(t, tc.cfg), brokers, connector.RunnerConfig{}, sink.Config{})
			err := r.wait(t, 30*time.Second)
			if !connector.IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("relay stopped with %v; want a permanent error saying %q", err, tc.want)
			}
		})
	}
}

// TestCDCInvalidRowStopsWithItsID: a row with a NULL aggregate id cannot
// be routed; without a dead letter topic the relay stops naming it.
func TestCDCInvalidRowStopsWithItsID(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN aggregateid DROP NOT NULL`); err != nil {
		t.Fatal(err)
	}
	r := e.start(t, connector.RunnerConfig{}, sink.Config{})
	var id string
	if err := e.pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', NULL, 'T', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	err := r.wait(t, 30*time.Second)
	var ee *connector.EventError
	if !errors.As(err, &ee) || ee.EventID != id || !strings.Contains(err.Error(), `"aggregateid" is missing or NULL`) {
		t.Fatalf("relay stopped with %v; want an error naming event %s and its NULL aggregateid", err, id)
	}
}

// captureFromNow creates the env's publication and slot, as the relay
// would, so that what commits from now on is captured before a relay runs.
func (e *env) captureFromNow(ctx context.Context, t testing.TB) {
	t.Helper()
	for _, sql := range []string{
		`CREATE PUBLICATION ` + pgx.Identifier{e.name}.Sanitize() + ` FOR TABLE outbox WITH (publish = 'insert')`,
		`SELECT pg_create_logical_replication_slot('` + e.name + `', 'pgoutput')`,
	} {
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func slotConfirmed(ctx context.Context, t testing.TB, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, slot string) pglogrepl.LSN {
	t.Helper()
	var lsn pglogrepl.LSN
	if err := pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(lsnScanner{&lsn}); err != nil {
		t.Fatalf("read slot %s: %v", slot, err)
	}
	return lsn
}

type lsnScanner struct{ lsn *pglogrepl.LSN }

func (s lsnScanner) ScanText(v pgtype.Text) error {
	l, err := pglogrepl.ParseLSN(v.String)
	*s.lsn = l
	return err
}

// TestCDCReconnectsAfterPostgresRestart: the database goes away under the
// relay (a fast shutdown, down for a few seconds, then a crash) and comes
// back; the relay reconnects and nothing is lost. While the server is
// down the runner restarts the source with exponential backoff, as its
// log says: the first retry within RetryMin (give or take the backoff's
// 50% jitter), later ones growing to RetryMax and never past it.
func TestCDCReconnectsAfterPostgresRestart(t *testing.T) {
	srv := testenv.PostgresServer(t)
	ctx := context.Background()
	url, err := srv.CreateDatabase(ctx, "reconnect")
	if err != nil {
		t.Fatal(err)
	}
	// The test server trades durability for speed; a crash must not take
	// back commits here, or "lost" would mean the database lost them.
	admin := connectPool(t, url)
	if _, err := admin.Exec(ctx, `ALTER DATABASE reconnect SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	name := uniqueName(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	rc := connector.RunnerConfig{RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond}
	r := startRelayLogging(t, openCDC(t, cdc.Config{URL: url, Table: "public.outbox", Slot: name, Publication: name}), brokers, rc, sink.Config{}, log)
	waitSlotActive(ctx, t, pool, name)

	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 500}
	w.write(ctx, t, pool)
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Down long enough for the backoff to reach RetryMax: about 1.6s of
	// retries at most, each jittered up by half.
	time.Sleep(3 * time.Second)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	waitSlotActive(ctx, t, pool, name)
	checkBackoff(t, retryWaits(t, logs.String()), rc)
	// Numbering goes on from where the first round left off.
	w2 := w
	w2.seqBase = 500 / 10
	w2.write(ctx, t, pool)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	w3 := w
	w3.seqBase = 1000 / 10
	w3.write(ctx, t, pool)

	rows := readRows(ctx, t, pool, "outbox")
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.settle(200 * time.Millisecond)
	c.check(t, rows, partitions)
}

// restartLine is the runner's WARN of a restart, with its wait: a run
// interrupted, or, while the server is down, a connection that failed.
var restartLine = regexp.MustCompile(`msg="(?:relay interrupted; restarting from the last checkpoint|cannot connect to PostgreSQL; retrying)".* retry_in=(\S+)`)

// retryWaits are the waits the runner's restarts announced in logs, in
// order.
func retryWaits(t *testing.T, logs string) []time.Duration {
	t.Helper()
	var waits []time.Duration
	for _, m := range restartLine.FindAllStringSubmatch(logs, -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("retry_in %q: %v", m[1], err)
		}
		waits = append(waits, d)
	}
	return waits
}

// checkBackoff checks waits against rc's exponential backoff with its 50%
// jitter: the first within 1.5 × RetryMin, some later one at least
// RetryMax / 2 (more than the first can be: it grew), none past
// 1.5 × RetryMax.
func checkBackoff(t *testing.T, waits []time.Duration, rc connector.RunnerConfig) {
	t.Helper()
	if len(waits) < 4 {
		t.Fatalf("%d restarts logged while PostgreSQL was down for 3s, want at least 4: %v", len(waits), waits)
	}
	if waits[0] > rc.RetryMin*3/2 {
		t.Errorf("the first restart waited %s, want at most 1.5 × RetryMin (%s): %v", waits[0], rc.RetryMin, waits)
	}
	if m := slices.Max(waits); m < rc.RetryMax/2 {
		t.Errorf("the longest wait was %s, want the backoff to have grown to RetryMax (%s) less its jitter: %v", m, rc.RetryMax, waits)
	}
	for _, d := range waits {
		if d > rc.RetryMax*3/2 {
			t.Errorf("a restart waited %s, past RetryMax (%s) and its jitter: %v", d, rc.RetryMax, waits)
		}
	}
	t.Logf("restarts while PostgreSQL was down waited %v", waits)
}

// TestCDCGracefulStopConfirmsWhileServerSends stops the relay while the
// server is still streaming a backlog to it, with the walsender slow to
// read (stopped with SIGSTOP, as a loaded machine delays it): the slot must
// still end at exactly the position Kafka acknowledged. Closing the socket
// right after the last status update left it behind: the close, with data
// unread, resets the connection, and the walsender, whose next send fails on
// the reset, exits without reading the update. The next start then repeated
// the events in between (GracefulRestartMidStream saw hundreds under load).
func TestCDCGracefulStopConfirmsWhileServerSends(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	e.captureFromNow(ctx, t)
	// A backlog the relay cannot read in the moment before it is stopped.
	workload{table: e.table, writers: 2, aggregates: 20, events: 20000, txnSize: 20}.write(ctx, t, e.pool)
	src := openCDC(t, cdc.Config{URL: e.url, Table: "public.outbox", Slot: e.name, Publication: e.name})
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.readAtLeast(ctx, t, 1000, time.Minute)

	var pid int
	if err := e.pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.name).Scan(&pid); err != nil {
		t.Fatalf("find the walsender: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Skipf("cannot stop the walsender (pid %d) to delay it: %v", pid, err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resume the walsender: %v", err)
			}
		}
	}
	defer resume()
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.stop(t) }()
	// The stop drains Kafka and sends its last status update while the
	// walsender sleeps. Resume it once the relay has closed the connection,
	// or after a moment if the relay waits for the server's answer.
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
	}
	resume()
	<-stopped

	want := src.ConfirmedLSN()
	if want == 0 {
		t.Fatal("the relay acknowledged nothing before it stopped; the test exercised nothing")
	}
	var got pglogrepl.LSN
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got = slotConfirmed(ctx, t, e.pool, e.name); got == want || time.Now().After(deadline) {
			break
		}
	}
	if got != want {
		t.Fatalf("after a graceful stop the slot is at %s, but Kafka acknowledged everything up to %s: the last status update was lost, and a restart repeats the events in between", got, want)
	}
}
