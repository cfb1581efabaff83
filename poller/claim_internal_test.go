package poller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestEventIndex: the event an error names, by id; a row without an id
// is the first invalid event without one.
func TestEventIndex(t *testing.T) {
	invalid := &connector.EventError{Err: errors.New(`column "id" is missing or NULL`)}
	events := []connector.Event{{ID: "a"}, {ID: ""}, {ID: "b"}, {ID: "", Invalid: invalid}, {ID: "b"}, {ID: "", Invalid: invalid}}
	for _, tc := range []struct {
		name   string
		events []connector.Event
		id     string
		want   int
	}{
		{"first", events, "a", 0},
		{"a duplicate id is its first row", events, "b", 2},
		{"not in the batch", events, "c", -1},
		{"no id: the first invalid row without one", events, "", 3},
		{"no id and no invalid row", events[:3], "", -1},
		{"empty batch", nil, "a", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventIndex(tc.events, tc.id); got != tc.want {
				t.Fatalf("eventIndex(%q) = %d; want %d", tc.id, got, tc.want)
			}
		})
	}
}

// claimTable is an outbox table with the poller's columns, and a claimer
// on it, for the tests of one claim's steps.
type claimTable struct {
	s    *Source
	c    *claimer
	conn *pgx.Conn
}

func newClaimTable(t *testing.T, cfg Config) *claimTable {
	t.Helper()
	ctx := context.Background()
	url := testenv.Postgres(t)
	cfg.URL = url
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, aggregatetype text NOT NULL,
		aggregateid text NOT NULL, type text, payload jsonb)`, s.n.tbl)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, DDL(cfg)); err != nil {
		t.Fatal(err)
	}
	conn, err := s.connect(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeConn(context.Background(), conn) })
	meta, err := s.inspect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	return &claimTable{s: s, c: &claimer{src: s, conn: conn, meta: meta}, conn: admin}
}

// row is a row to insert: payload is an SQL expression; attempts the
// failed attempts so far.
type row struct {
	id, payload string
	attempts    int
}

// fill empties the table and inserts rows, in order.
func (ct *claimTable) fill(t *testing.T, rows ...row) {
	t.Helper()
	ctx := context.Background()
	n := &ct.s.n
	if _, err := ct.conn.Exec(ctx, "DELETE FROM "+n.tbl+"; DELETE FROM "+n.dl); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := ct.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload, %s) VALUES ($1, 'order', 'o1', 't', %s, $2)`,
			n.tbl, n.attempts, r.payload), r.id, r.attempts); err != nil {
			t.Fatal(err)
		}
	}
}

// claim begins the claim's transaction and reads as a claim does, from
// every bucket.
func (ct *claimTable) claim(t *testing.T) ([]connector.Event, []string) {
	t.Helper()
	ctx := context.Background()
	if _, err := ct.c.conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	held := make([]int32, ct.s.cfg.Buckets)
	for i := range held {
		held[i] = int32(i)
	}
	events, tids, err := ct.c.read(ctx, held, ct.s.cfg.BatchSize)
	if err != nil {
		t.Fatal(err)
	}
	return events, tids
}

func ids(events []connector.Event) []string {
	var s []string
	for _, e := range events {
		s = append(s, e.ID)
	}
	return s
}

// TestClaimRead: a claim ends before a row that failed before, or is only
// that row when it comes first, so that its next failure rolls back no
// other; and it ends before the row that takes its values past
// poll.max_batch_bytes as read, even where PostgreSQL's own sizes
// (compressed jsonb) let the query return more; a first row larger than
// the bound still goes, alone.
func TestClaimRead(t *testing.T) {
	const bound = 64 << 10
	ct := newClaimTable(t, Config{Table: "public.claim_read", MaxBatchBytes: bound})
	small := `'{"n":1}'`
	// 40,000 bytes as text, a few hundred stored: two exceed the bound
	// only as read.
	compressed := `jsonb_build_object('data', repeat('x', 40000))`
	for _, tc := range []struct {
		name string
		rows []row
		want []string
	}{
		{"fresh rows share a claim", []row{{"e1", small, 0}, {"e2", small, 0}, {"e3", small, 0}}, []string{"e1", "e2", "e3"}},
		{"a failed row first goes alone", []row{{"e1", small, 1}, {"e2", small, 0}, {"e3", small, 0}}, []string{"e1"}},
		{"a failed row later ends the claim before it", []row{{"e1", small, 0}, {"e2", small, 0}, {"e3", small, 2}, {"e4", small, 0}}, []string{"e1", "e2"}},
		{"the byte bound as read", []row{{"e1", compressed, 0}, {"e2", compressed, 0}, {"e3", small, 0}}, []string{"e1"}},
		{"under the byte bound", []row{{"e1", compressed, 0}, {"e2", small, 0}}, []string{"e1", "e2"}},
		{"a first row over the bound goes alone", []row{{"e1", `jsonb_build_object('data', repeat('x', 100000))`, 0}, {"e2", small, 0}}, []string{"e1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct.fill(t, tc.rows...)
			events, tids := ct.claim(t)
			defer ct.c.rollback(context.Background())
			if got := ids(events); !slices.Equal(got, tc.want) {
				t.Fatalf("claimed %v; want %v", got, tc.want)
			}
			if len(tids) != len(events) {
				t.Fatalf("%d ctids for %d events", len(tids), len(events))
			}
		})
	}
}

// TestClaimFail: the quarantine of a batch the runner could not publish.
// An error that names no event of the batch rolls the claim back; one that
// names an event records a failed attempt on its row and commits that
// alone; the row moves to the dead-letter table, with why, only on its
// last attempt and when it failed alone, since a broker refuses whole
// batches. recorded: fail reports that it recorded the failure.
func TestClaimFail(t *testing.T) {
	ct := newClaimTable(t, Config{Table: "public.claim_fail", MaxAttempts: 2})
	small := `'{"n":1}'`
	named := func(id string) error {
		return &connector.EventError{EventID: id, Err: errors.New("the broker refused the record: INVALID_RECORD")}
	}
	for _, tc := range []struct {
		name  string
		rows  []row
		cause error
		// want are the rows' attempts afterwards by id; a row missing from
		// it is not in the outbox.
		want map[string]int
		// dead is the row moved to the dead-letter table, if any.
		dead     string
		recorded bool
		// maxAttempts replaces poll.max_attempts (2), when set.
		maxAttempts int
	}{
		{
			name:  "not an event's error: rolled back",
			rows:  []row{{"e1", small, 0}, {"e2", small, 0}},
			cause: errors.New("produce: broker unavailable"),
			want:  map[string]int{"e1": 0, "e2": 0},
		},
		{
			name:  "an event not in the batch: rolled back",
			rows:  []row{{"e1", small, 0}, {"e2", small, 0}},
			cause: named("e9"),
			want:  map[string]int{"e1": 0, "e2": 0},
		},
		{
			name:     "first failure: an attempt counted",
			rows:     []row{{"e1", small, 0}, {"e2", small, 0}},
			cause:    fmt.Errorf("relay: %w", named("e2")),
			want:     map[string]int{"e1": 0, "e2": 1},
			recorded: true,
		},
		{
			// With one attempt allowed, a row's first failure is its last,
			// and it may have been a neighbour's: it is claimed alone next.
			name:        "last attempt among others: counted, not moved",
			rows:        []row{{"e1", small, 0}, {"e2", small, 0}},
			cause:       named("e1"),
			want:        map[string]int{"e1": 1, "e2": 0},
			recorded:    true,
			maxAttempts: 1,
		},
		{
			// e1 failed before, so the claim holds it alone.
			name:     "last attempt alone: moved to the dead-letter table",
			rows:     []row{{"e1", small, 1}, {"e2", small, 0}},
			cause:    named("e1"),
			want:     map[string]int{"e2": 0},
			dead:     "e1",
			recorded: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ct.fill(t, tc.rows...)
			if tc.maxAttempts > 0 {
				defer func(n int) { ct.s.cfg.MaxAttempts = n }(ct.s.cfg.MaxAttempts)
				ct.s.cfg.MaxAttempts = tc.maxAttempts
			}
			events, tids := ct.claim(t)
			recorded, err := ct.c.fail(ctx, events, tids, tc.cause)
			if err != nil {
				t.Fatalf("fail: %v", err)
			}
			// fail ended the claim's transaction either way.
			if st := ct.c.conn.PgConn().TxStatus(); st != 'I' {
				t.Fatalf("after fail the claim's connection is in transaction status %q; want idle", st)
			}
			got := map[string]int{}
			rows, err := ct.conn.Query(ctx, fmt.Sprintf("SELECT id, %s FROM %s", ct.s.n.attempts, ct.s.n.tbl))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id string
				var n int
				if err := rows.Scan(&id, &n); err != nil {
					t.Fatal(err)
				}
				got[id] = n
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("outbox rows' attempts %v; want %v", got, tc.want)
			}
			var dead []string
			var reason string
			var attempts int
			dl, err := ct.conn.Query(ctx, fmt.Sprintf("SELECT event_id, reason, attempts FROM %s", ct.s.n.dl))
			if err != nil {
				t.Fatal(err)
			}
			for dl.Next() {
				var id string
				if err := dl.Scan(&id, &reason, &attempts); err != nil {
					t.Fatal(err)
				}
				dead = append(dead, id)
			}
			if err := dl.Err(); err != nil {
				t.Fatal(err)
			}
			if tc.dead == "" && len(dead) > 0 || tc.dead != "" && !slices.Equal(dead, []string{tc.dead}) {
				t.Fatalf("dead-letter table holds %v; want %q", dead, tc.dead)
			}
			if tc.dead != "" && (reason != "the broker refused the record: INVALID_RECORD" || attempts != 2) {
				t.Errorf("dead-lettered with reason %q after %d attempts; want the refusal, after 2", reason, attempts)
			}
			if recorded != tc.recorded {
				t.Errorf("fail recorded the failure: %v; want %v", recorded, tc.recorded)
			}
		})
	}
}

// TestClaimQuarantine: a claim whose batch failed keeps its rows until the
// runner asks it to quarantine the event (Batch.Quarantine), which records
// the attempt in the claim's transaction, or stops the source without
// asking (a dead letter topic takes the event, or the failure was no
// event's), which rolls the claim back. Asked after the claim ended, it
// answers that nothing was recorded.
func TestClaimQuarantine(t *testing.T) {
	ct := newClaimTable(t, Config{Table: "public.claim_quarantine", MaxAttempts: 2})
	small := `'{"n":1}'`
	cause := &connector.EventError{EventID: "e2", Err: errors.New("the broker refused the record: INVALID_RECORD")}
	for _, tc := range []struct {
		name string
		ask  bool
		want map[string]int // the rows' attempts afterwards, by id
	}{
		{"asked: the attempt is recorded", true, map[string]int{"e1": 0, "e2": 1}},
		{"not asked: rolled back", false, map[string]int{"e1": 0, "e2": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bg := context.Background()
			ct.fill(t, row{"e1", small, 0}, row{"e2", small, 0})
			out := make(chan connector.Batch)
			ct.c.out = out
			ctx, stop := context.WithCancel(bg)
			defer stop()
			ended := make(chan error, 1)
			go func() {
				res, err := ct.c.claim(ctx)
				if err == nil && !res.failed {
					err = fmt.Errorf("claim result %+v; want failed", res)
				}
				ended <- err
			}()
			var b connector.Batch
			select {
			case b = <-out:
			case <-time.After(30 * time.Second):
				t.Fatal("no batch within 30s")
			}
			if got := ids(b.Events); !slices.Equal(got, []string{"e1", "e2"}) {
				t.Fatalf("claimed %v; want [e1 e2]", got)
			}
			b.Done(cause)
			if tc.ask {
				if err := b.Quarantine(bg, cause); err != nil {
					t.Fatalf("Quarantine: %v", err)
				}
			}
			stop()
			select {
			case err := <-ended:
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the claim did not end within 30s of the stop")
			}
			if err := b.Quarantine(bg, cause); !errors.Is(err, errClaimGone) {
				t.Errorf("Quarantine after the claim ended: %v; want %v", err, errClaimGone)
			}
			if got := ct.attempts(t); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("outbox rows' attempts %v; want %v", got, tc.want)
			}
		})
	}
}

// attempts are the outbox rows' failed attempts, by id.
func (ct *claimTable) attempts(t *testing.T) map[string]int {
	t.Helper()
	rows, err := ct.conn.Query(context.Background(), fmt.Sprintf("SELECT id, %s FROM %s", ct.s.n.attempts, ct.s.n.tbl))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		id string
		n  int
	}, error) {
		var v struct {
			id string
			n  int
		}
		return v, r.Scan(&v.id, &v.n)
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, v := range got {
		m[v.id] = v.n
	}
	return m
}
