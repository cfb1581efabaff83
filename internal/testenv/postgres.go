package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

const (
	// EnvPostgresURL names an existing server to create test databases on
	// instead of starting one. Its URL must name a database to connect to
	// for CREATE DATABASE, e.g. postgres://postgres@host:5432/postgres.
	EnvPostgresURL = "OUTBOXRELAY_TEST_POSTGRES_URL"
	// EnvDocker set to "0" keeps testenv from using Docker even when a
	// daemon answers.
	EnvDocker = "OUTBOXRELAY_TEST_DOCKER"

	// startTimeout bounds starting a server: initdb and start take about a
	// second, pulling an image may take much longer.
	startTimeout = 5 * time.Minute
	// dropTimeout bounds the cleanup of one test database.
	dropTimeout = 30 * time.Second
)

// sharedPostgres is the server behind Postgres, started on first use.
var sharedPostgres struct {
	once    sync.Once
	backend *pgBackend
	err     error
}

// pgBackend is a server that test databases are created on.
type pgBackend struct {
	adminURL string       // a database to connect to for CREATE/DROP DATABASE
	origin   string       // where the server came from, for the test log
	close    func() error // nil when the server is not ours to stop
}

// dbURL returns the URL of database name on the backend's server.
func (b *pgBackend) dbURL(name string) string {
	u, _ := url.Parse(b.adminURL) // parsed when the backend was made
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// Postgres returns the URL of a new, empty database on the server shared by
// the test binary, superuser access, dropped at the end of the test with the
// replication slots it holds (connections still open are terminated).
func Postgres(t testing.TB) string {
	t.Helper()
	b, err := postgresBackend()
	if err != nil {
		skipIfMajorMissing(t, err)
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
	name := databaseName(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adminExec(ctx, b.adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database %s on %s: %v", name, b.origin, err)
	}
	t.Logf("testenv: database %s on %s", name, b.origin)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if err := dropDatabase(ctx, b.adminURL, name); err != nil {
			// Logged, not failed: the test itself is over and passed or
			// failed on its own; a leftover database is only clutter.
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	return b.dbURL(name)
}

// PostgresServer starts a PostgreSQL server for this test alone, which the
// test may Stop, Kill and Restart; t.Cleanup closes it. It always runs the
// local installation (localpg), whatever Postgres uses; with
// OUTBOXRELAY_TEST_POSTGRES_URL set and PostgreSQL not installed here, the
// test is skipped.
func PostgresServer(t testing.TB) *localpg.Server {
	t.Helper()
	return PostgresServerWith(t, nil)
}

// PostgresServerWith is PostgresServer with extra postgresql.conf
// settings, for a test that needs one the shared server lacks.
func PostgresServerWith(t testing.TB, settings map[string]string) *localpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := localpg.Start(ctx, localpg.Options{Settings: settings})
	if err != nil {
		if errors.Is(err, localpg.ErrNotInstalled) && os.Getenv(EnvPostgresURL) != "" {
			t.Skipf("testenv: this test needs a local PostgreSQL it can stop: %v", err)
		}
		skipIfMajorMissing(t, err)
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return srv
}

// skipIfMajorMissing skips the test when err says that the major
// OUTBOXRELAY_TEST_PG asks for is not on this host: a host without it
// cannot run the test, which is not the test failing.
func skipIfMajorMissing(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, localpg.ErrNotInstalled) && os.Getenv(localpg.MajorEnv) != "" {
		t.Skipf("testenv: %v", err)
	}
}

func postgresBackend() (*pgBackend, error) {
	s := &sharedPostgres
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		s.backend, s.err = startPostgresBackend(ctx)
	})
	return s.backend, s.err
}

func startPostgresBackend(ctx context.Context) (*pgBackend, error) {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		if _, err := url.Parse(u); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvPostgresURL, err)
		}
		return &pgBackend{adminURL: u, origin: EnvPostgresURL}, nil
	}
	var dockerErr error
	if os.Getenv(EnvDocker) != "0" && dockerAvailable(ctx) {
		b, err := startDockerPostgres(ctx)
		if err == nil {
			return b, nil
		}
		dockerErr = err
	}
	srv, err := localpg.Start(ctx, localpg.Options{})
	if err != nil {
		return nil, errors.Join(err, dockerErr)
	}
	origin := fmt.Sprintf("local PostgreSQL %d in %s", srv.Major(), srv.Dir())
	if dockerErr != nil {
		origin += fmt.Sprintf(" (Docker failed: %v)", dockerErr)
	}
	return &pgBackend{adminURL: srv.URL("postgres"), origin: origin, close: srv.Close}, nil
}

// closeSharedPostgres stops the shared server if this binary started one.
func closeSharedPostgres() error {
	s := &sharedPostgres
	// Make a later Postgres call fail rather than start a server that no
	// one would stop.
	s.once.Do(func() { s.err = errors.New("testenv: Postgres called after Main finished") })
	if s.backend == nil || s.backend.close == nil {
		return nil
	}
	return s.backend.close()
}

var (
	// runID tells apart the databases of test binaries sharing one server
	// (OUTBOXRELAY_TEST_POSTGRES_URL, or packages tested in parallel).
	runID = fmt.Sprintf("%08x", rand.Uint32())
	dbSeq atomic.Int64
)

// databaseName returns a new database name that shows which test made it,
// within PostgreSQL's 63-byte limit on identifiers.
func databaseName(t testing.TB) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 32 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if s := b.String(); s != "" && s[len(s)-1] != '_' {
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("t%s_%d_%s", runID, dbSeq.Add(1), strings.TrimRight(b.String(), "_"))
}

func adminExec(ctx context.Context, adminURL, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// dropDatabase drops database name and, first, its replication slots, which
// would block DROP DATABASE: a slot in use is freed by terminating the
// connection using it.
func dropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	for {
		var left int
		if err := conn.QueryRow(ctx,
			"SELECT count(*) FROM pg_replication_slots WHERE database = $1", name).Scan(&left); err != nil {
			return fmt.Errorf("count replication slots: %w", err)
		}
		if left == 0 {
			break
		}
		if _, err := conn.Exec(ctx, `
			SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
			return fmt.Errorf("terminate replication connections: %w", err)
		}
		// A terminated WAL sender releases its slot a moment after
		// pg_terminate_backend returns; until then dropping it fails with
		// object_in_use, and the loop goes round again.
		_, err := conn.Exec(ctx, `
			SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = $1 AND NOT active`, name)
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) &&
			(pgErr.Code == pgerrcode.ObjectInUse || pgErr.Code == pgerrcode.UndefinedObject)) {
			return fmt.Errorf("drop replication slots: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop replication slots: %d left: %w", left, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// WITH (FORCE) (PostgreSQL 13) terminates the connections still open.
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}
