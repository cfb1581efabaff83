package cdc

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The widening of a row's 32-bit xmin, evaluated by the server with the
// reading snapshot's xmax and the row's xmin given: an xmin from the
// current epoch, from the one before (the counter wrapped since), at the
// very start, and an ancient frozen one that comes out too recent (and so
// is published again, never left out).
func TestRowXid8(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, tc := range []struct {
		name       string
		next, xmin uint64
		want       int64
	}{
		{"this epoch", 5<<32 | 1000, 900, 5<<32 | 900},
		{"the epoch before", 5<<32 | 10, 4294967200, 4<<32 | 4294967200},
		{"epoch 0", 1000, 3, 3},
		{"the next id itself: not a row anyone sees, taken as new", 5<<32 | 1000, 1000, 5<<32 | 1000},
	} {
		expr := strings.ReplaceAll(rowXid8, "(SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8)", strconv.FormatUint(tc.next, 10)+"::int8")
		expr = strings.ReplaceAll(expr, "xmin::text::int8", strconv.FormatUint(tc.xmin, 10)+"::int8")
		var got int64
		if err := conn.QueryRow(ctx, "SELECT "+expr).Scan(&got); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: next %d, xmin %d: widened to %d, want %d", tc.name, tc.next, tc.xmin, got, tc.want)
		}
	}
}

// The filter a backfill uses with a transaction snapshot, against rows
// written around one: a row committed before it is left out; a row of a
// transaction running when it was taken is chosen, and so is one that
// transaction wrote in a subtransaction (a SAVEPOINT), whose id the
// snapshot's in-progress list does not hold; so is a row committed after.
func TestSnapshotFilterChooses(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	a, b := conn(), conn()
	mustExec := func(c *pgx.Conn, sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			if _, err := c.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	mustExec(a, `CREATE TABLE snapfilter (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO snapfilter (id) VALUES ('before')`,
		`BEGIN`, `INSERT INTO snapfilter (id) VALUES ('running')`, `SAVEPOINT s`, `INSERT INTO snapfilter (id) VALUES ('in a savepoint')`)
	src := &Source{cfg: Config{URL: url}, log: slog.New(slog.DiscardHandler)}
	src.cfg.Network.SetDefaults()
	sc, snap, err := src.txnSnapshot(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.Close(ctx)
	mustExec(b, `INSERT INTO snapfilter (id) VALUES ('after')`)
	mustExec(a, `COMMIT`)

	col := &timestampColumn{name: "created_at"}
	for _, tc := range []struct {
		name    string
		history bool
		col     *timestampColumn
	}{
		{"the server's history proves it", true, nil},
		{"a time must say a row came before it", false, col},
		{"both", true, col},
	} {
		f, words, ok := snapshotFilter(txnProof{snap: snap, history: tc.history}, snap.Taken, tc.col, false)
		if !ok {
			t.Fatalf("%s: the snapshot does not serve", tc.name)
		}
		args := make([]any, len(f.args))
		for i, a := range f.args {
			args[i] = string(a)
		}
		tx, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "SELECT id || ' ' || ("+f.repeat+")::text FROM snapfilter WHERE "+f.where+" ORDER BY id", args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, f.where)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// With a column, the rows inserted before the time chosen from
		// (here the snapshot's) are reported as repeats (1), the others
		// not; without, every row chosen is.
		want := []string{"after 1", "in a savepoint 1", "running 1"}
		if tc.col != nil {
			want[0] = "after 0"
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: chose %v, want %v (%s)", tc.name, got, want, words)
		}
	}
	if _, _, ok := snapshotFilter(txnProof{snap: snap}, snap.Taken, nil, false); ok {
		t.Error("a snapshot whose history is not proved served with no time to say which rows came before it")
	}
}

func TestParseTimelineHistory(t *testing.T) {
	ends, err := parseTimelineHistory([]byte("1\t0/3000158\tno recovery target specified\n\n2\t1/A0000000\tbefore 2026-11-24 07:00:00+00\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ends[1] != 0x3000158 || ends[2] != 0x1_A0000000 || ends[3] != 0 {
		t.Fatalf("ends %v; want timeline 1 to end at 0/3000158 and 2 at 1/A0000000", ends)
	}
	if _, err := parseTimelineHistory([]byte("1 nonsense\n")); err == nil {
		t.Error("a line without an LSN was read")
	}
}

func TestParseTxnSnapshot(t *testing.T) {
	xmin, xmax, err := parseTxnSnapshot("21474840480:21474840490:21474840481,21474840485")
	if err != nil || xmin != 5<<32|4000 || xmax != 5<<32|4010 {
		t.Fatalf("%d, %d, %v; want 5:4000 and 5:4010", xmin, xmax, err)
	}
	for _, bad := range []string{"", "12:10:", "0:0:", "x:1:", "1:2"} {
		if _, _, err := parseTxnSnapshot(bad); err == nil {
			t.Errorf("%q read as a snapshot", bad)
		}
	}
}

func TestWalFileTimeline(t *testing.T) {
	if tli, err := walFileTimeline("0000000A0000000100000042"); err != nil || tli != 10 {
		t.Fatalf("timeline %d, %v; want 10", tli, err)
	}
	for _, bad := range []string{"", "000000000000000100000042", "0000000A00000001"} {
		if _, err := walFileTimeline(bad); err == nil {
			t.Errorf("%q read as a WAL file name", bad)
		}
	}
}

// A snapshot taken waits until a checkpoint reaches its position, then
// every later checkpoint carries it until the next one is carried; only
// one waits at a time, and none is carried while a snapshot of the table
// is under way.
func TestPositionsCarryTxnSnapshot(t *testing.T) {
	id := checkpointIdentity{key: connector.CheckpointKey{SystemID: "1", Database: "d", Slot: "s"}}
	now := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	s1 := connector.TxnSnapshot{Xmin: 10, Xmax: 12, LSN: 100, Timeline: 1, Taken: now, ServerStart: now}
	s2 := connector.TxnSnapshot{Xmin: 20, Xmax: 20, LSN: 300, Timeline: 1, Taken: now, ServerStart: now}
	var p positions
	save := func(acked uint64) connector.Checkpoint {
		t.Helper()
		p.advance(pglogrepl.LSN(acked))
		cp, ok := p.toSave(id, now)
		if !ok {
			t.Fatalf("no checkpoint due at %d", acked)
		}
		p.stored(cp, now)
		return cp
	}
	if !p.snapshotTaken(s1) || p.snapshotTaken(s2) {
		t.Fatal("a second snapshot was taken while the first waited")
	}
	if cp := save(50); cp.TxnSnapshot.Known() {
		t.Fatalf("a checkpoint at 50 carries the snapshot at %d", cp.TxnSnapshot.LSN)
	}
	if cp := save(100); cp.TxnSnapshot != s1 || p.snapWaiting != nil {
		t.Fatalf("the checkpoint at 100 carries %+v (waiting %v), want the snapshot at 100", cp.TxnSnapshot, p.snapWaiting)
	}
	if !p.snapshotTaken(s2) {
		t.Fatal("the next snapshot was not taken once the first was carried")
	}
	if cp := save(200); cp.TxnSnapshot != s1 {
		t.Fatalf("the checkpoint at 200 carries %+v, want the one at 100 still", cp.TxnSnapshot)
	}
	p.snapshotPending = true
	if cp, _ := p.toSave(id, now); cp.TxnSnapshot == s2 {
		t.Fatal("a checkpoint with a snapshot of the table under way carries the new transaction snapshot")
	}
	p.snapshotPending = false
	if cp := save(300); cp.TxnSnapshot != s2 {
		t.Fatalf("the checkpoint at 300 carries %+v, want the one at 300", cp.TxnSnapshot)
	}
}

// BenchmarkTxnSnapshot is what one transaction snapshot for the checkpoint
// costs, on its connection: the two statements' round trips against a
// local server, with the server's work in them. The source takes at most
// one per cdc.checkpoint_interval.
func BenchmarkTxnSnapshot(b *testing.B) {
	ctx := context.Background()
	src := &Source{cfg: Config{URL: testenv.Postgres(b)}, log: slog.New(slog.DiscardHandler)}
	src.cfg.Network.SetDefaults()
	var conn *pgx.Conn
	for b.Loop() {
		var err error
		if conn, _, err = src.txnSnapshot(ctx, conn); err != nil {
			b.Fatal(err)
		}
	}
	conn.Close(ctx)
}
