package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// A primary and a physical standby, for the failover-slot tests (PostgreSQL
// 17 and later) and the standby-as-source tests (16 and later). The standby
// is built without pg_basebackup, which this host has only for 15 and which
// refuses a newer server: the primary is stopped cleanly, its data
// directory copied, and the copy started with standby.signal and
// primary_conninfo. A clean shutdown leaves a consistent data directory
// whose last record the primary streams on from.

// standbySlot is the physical slot the standby streams through.
const standbySlot = "standby_1"

// replicaDB is the database the outbox lives in, on both servers.
const replicaDB = "outbox"

// localMajor is the major version of the servers localpg starts, once a
// test has asked one; 0 before.
var localMajor atomic.Int64

type replicaPair struct {
	primary, standby *localpg.Server
	major            int
}

// serverMajor asks the server at url for its major version.
func serverMajor(ctx context.Context, t testing.TB, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		t.Fatal(err)
	}
	return num / 10000
}

// startReplicaPair starts a primary, skipping the test when its major
// version is below minMajor (what names the feature that needs it), runs
// setup in database replicaDB on it, and starts a hot standby of it that
// streams through the physical slot standbySlot, with
// hot_standby_feedback, and from 17 with sync_replication_slots.
func startReplicaPair(t *testing.T, minMajor int, what string, setup func(context.Context, *pgxpool.Pool)) *replicaPair {
	t.Helper()
	return startReplicaPairWith(t, minMajor, what, nil, setup)
}

// startReplicaPairWith is startReplicaPair with settings for both servers,
// say track_commit_timestamp, which a promoted standby keeps only if it
// has it on too.
func startReplicaPairWith(t *testing.T, minMajor int, what string, settings map[string]string, setup func(context.Context, *pgxpool.Pool)) *replicaPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	skip := func(major int) {
		t.Helper()
		t.Skipf("%s needs PostgreSQL %d or later; the server started is PostgreSQL %d (set OUTBOXRELAY_TEST_PG=%d, or %s to a newer server's bin directory)",
			what, minMajor, major, minMajor, localpg.BinDirEnv)
	}
	// Every server this test binary starts runs the same binaries: once
	// one has said its version, a test that needs a newer one skips
	// without starting another.
	if major := int(localMajor.Load()); major != 0 && major < minMajor {
		skip(major)
	}
	primary := testenv.PostgresServerWith(t, settings)
	major := serverMajor(ctx, t, primary.URL("postgres"))
	localMajor.Store(int64(major))
	if major < minMajor {
		skip(major)
	}
	url, err := primary.CreateDatabase(ctx, replicaDB)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	setup(ctx, pool)
	if _, err := pool.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true)`, standbySlot); err != nil {
		t.Fatalf("create the standby's physical slot: %v", err)
	}
	pool.Close()

	if err := primary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// primary_conninfo goes into postgresql.auto.conf, not on the command
	// line, which would win over ALTER SYSTEM: a test stops the standby's
	// WAL receiver by setting it empty. No application_name: the slot sync
	// worker names its connection to the primary by it only when
	// primary_conninfo does not.
	dir := copyDataDir(t, primary.Dir(), fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres dbname=postgres'\n", primary.Port()))
	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	standbySettings := maps.Clone(settings)
	if standbySettings == nil {
		standbySettings = map[string]string{}
	}
	standbySettings["primary_slot_name"] = standbySlot
	standbySettings["hot_standby_feedback"] = "on"
	if major >= 17 {
		standbySettings["sync_replication_slots"] = "on"
	}
	standby, err := localpg.Start(ctx, localpg.Options{Dir: dir, Settings: standbySettings})
	if err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	t.Cleanup(func() {
		if err := standby.Close(); err != nil {
			t.Errorf("standby: %v", err)
		}
	})
	p := &replicaPair{primary: primary, standby: standby, major: major}
	p.waitStandbyStreams(ctx, t, true)
	return p
}

// copyDataDir copies the data directory below from, a stopped server's,
// into a new directory that localpg.Start takes as its Dir, and makes the
// copy a standby, with autoConf added to its postgresql.auto.conf. The
// directory is removed at the test's end, after the standby started on it
// is closed.
func copyDataDir(t *testing.T, from, autoConf string) string {
	t.Helper()
	// Not t.TempDir: a server running as the OS user postgres (when the
	// tests run as root) must reach it, and t.TempDir's parents are 0700.
	dir, err := os.MkdirTemp("", "outboxrelay-standby-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	if out, err := exec.Command("cp", "-a", filepath.Join(from, "data"), data).CombinedOutput(); err != nil {
		t.Fatalf("copy the primary's data directory: %v\n%s", err, out)
	}
	// The primary's slots are its own; pg_basebackup leaves them out too.
	slots, _ := filepath.Glob(filepath.Join(data, "pg_replslot", "*"))
	for _, s := range slots {
		if err := os.RemoveAll(s); err != nil {
			t.Fatal(err)
		}
	}
	signal := filepath.Join(data, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	auto := filepath.Join(data, "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(autoConf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		// Written by root when the tests run as root; the server, which
		// runs as postgres then, removes standby.signal at promotion.
		if err := os.Chown(signal, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitStandbyStreams waits until the standby streams through its slot on
// the primary (on true) or no longer does (on false).
func (p *replicaPair) waitStandbyStreams(ctx context.Context, t *testing.T, on bool) {
	t.Helper()
	pool := connectPool(t, p.primary.URL("postgres"))
	for deadline := time.Now().Add(time.Minute); ; {
		var active bool
		if err := pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, standbySlot).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active == on {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's slot %s is still active=%v after a minute", standbySlot, active)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failoverURL lists both servers and asks for the writable one, the way a
// client follows a failover without a proxy or a DNS change.
func (p *replicaPair) failoverURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		p.primary.Port(), p.standby.Port(), replicaDB)
}

// exec runs statements on a server's database db.
func execOn(ctx context.Context, t *testing.T, url string, sqls ...string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// failover kills the primary, as a crash of its host would, and promotes
// the standby.
func (p *replicaPair) failover(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := p.primary.Kill(); err != nil {
		t.Fatal(err)
	}
	p.promote(ctx, t)
}

// promote promotes the standby and waits until it is a primary.
func (p *replicaPair) promote(ctx context.Context, t *testing.T) {
	t.Helper()
	conn, err := pgx.Connect(ctx, p.standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var done bool
	if err := conn.QueryRow(ctx, `SELECT pg_promote(true, 60)`).Scan(&done); err != nil || !done {
		t.Fatalf("promote the standby: %v (done: %v)", err, done)
	}
}

// failoverAfterStop stops the primary with a fast shutdown, which sends
// the standby all of its WAL before it ends (whatever a client was told
// committed, the standby has), and promotes the standby: a failover of a
// primary taken down mid-load, not a crash.
func (p *replicaPair) failoverAfterStop(ctx context.Context, t *testing.T) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.primary.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	p.promote(ctx, t)
}

// failoverWriters commits, from each of n writers, one event every
// interval through pool until stop closes; the channel closes once they
// have all stopped. Each writer has five aggregates of its own. A commit
// that fails (the primary killed, no server writable yet) is retried after
// a pause, with the aggregates numbered on from what the writable server
// holds: what a crash took from the history is not there, and numbering
// on from what is keeps each aggregate's numbers its commit order there.
func failoverWriters(ctx context.Context, pool *pgxpool.Pool, n int, interval time.Duration, stop <-chan struct{}) (<-chan struct{}, *atomic.Int64) {
	done := make(chan struct{})
	failed := &atomic.Int64{}
	var wg sync.WaitGroup
	for wr := range n {
		wg.Go(func() {
			var aggs []string
			for k := range 5 {
				aggs = append(aggs, aggID(wr+n*k))
			}
			var seq map[string]int
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if seq == nil {
					var err error
					if seq, err = lastSeqs(ctx, pool, aggs); err != nil {
						failed.Add(1)
						continue
					}
				}
				a := aggs[i%len(aggs)]
				_, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'Happened', $2)`,
					a, fmt.Sprintf(`{"aggregate": %q, "seq": %d, "pad": "%s"}`, a, seq[a]+1, pad))
				if err != nil {
					// Committed or not, the server that answers next
					// says what holds.
					failed.Add(1)
					seq = nil
					continue
				}
				seq[a]++
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return done, failed
}

// lastSeqs reads the highest number of each aggregate in aggs.
func lastSeqs(ctx context.Context, pool *pgxpool.Pool, aggs []string) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT aggregateid, max((payload->>'seq')::int) FROM outbox WHERE aggregateid = ANY($1) GROUP BY aggregateid`, aggs)
	if err != nil {
		return nil, err
	}
	seq := map[string]int{}
	for rows.Next() {
		var a string
		var s int
		if err := rows.Scan(&a, &s); err != nil {
			return nil, err
		}
		seq[a] = s
	}
	return seq, rows.Err()
}
