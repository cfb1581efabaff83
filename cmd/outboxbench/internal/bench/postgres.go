package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

// pgSettings are the server's settings for a benchmark; the report lists
// them.
var pgSettings = map[string]string{
	"wal_level": "logical",
	// The data is thrown away, and a shared machine's disk would otherwise
	// be in every figure. fsync off does not change what the walsender
	// does: it still waits for a commit's WAL to be written and flushed
	// (flush is then a no-op) before decoding it.
	"fsync":            "off",
	"full_page_writes": "off",
	// A COMMIT returns once its WAL is flushed, which is also when the
	// walsender may send it; with synchronous_commit off, commit-to-Kafka
	// latency would include up to wal_writer_delay (200ms) of waiting for
	// the WAL writer, which is the server's choice, not the relay's.
	"synchronous_commit": "on",
	// PostgreSQL's default; localpg's tests lower it to 64kB to make the
	// decoder spill, which no production server does.
	"logical_decoding_work_mem": "64MB",
	"shared_buffers":            "256MB",
	// No checkpoint in the middle of a measurement.
	"max_wal_size":       "16GB",
	"checkpoint_timeout": "1h",
	"max_connections":    "100",
}

// reportedSettings are the server settings the report shows.
var reportedSettings = []string{
	"fsync", "synchronous_commit", "full_page_writes", "wal_level", "logical_decoding_work_mem",
	"shared_buffers", "max_wal_size", "checkpoint_timeout", "wal_sender_timeout", "wal_writer_delay",
}

// database is the benchmark's PostgreSQL server and database.
type database struct {
	srv  *localpg.Server
	url  string
	conn *pgx.Conn // for setup and queries between phases
	// headers: outbox tables have a headers column (Config.Tracing).
	headers bool
}

// With walDefaults the server keeps its own WAL settings (full-page
// writes, checkpoints) instead of the benchmark's.
func startPostgres(ctx context.Context, walDefaults bool) (*database, error) {
	settings := maps.Clone(pgSettings)
	if walDefaults {
		// PostgreSQL's own: localpg turns full-page writes off for its
		// tests, so it is set back explicitly.
		settings["full_page_writes"] = "on"
		delete(settings, "max_wal_size")
		delete(settings, "checkpoint_timeout")
	}
	srv, err := localpg.Start(ctx, localpg.Options{Settings: settings})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	url, err := srv.CreateDatabase(ctx, "bench")
	if err != nil {
		srv.Close()
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return &database{srv: srv, url: url, conn: conn}, nil
}

func (db *database) close() {
	db.conn.Close(context.Background())
	db.srv.Close()
}

// version is the server's version string.
func (db *database) version(ctx context.Context) (string, error) {
	var v string
	err := db.conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return "PostgreSQL " + v, err
}

// settings reads the reported settings from the server.
func (db *database) settings(ctx context.Context) (map[string]string, error) {
	rows, err := db.conn.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1)`, reportedSettings)
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

func (db *database) createOutbox(ctx context.Context, table string) error {
	ddl := fmt.Sprintf(outboxDDL, pgx.Identifier{table}.Sanitize())
	if db.headers {
		ddl = strings.TrimSuffix(ddl, "\n)") + ",\n\theaders       jsonb\n)"
	}
	if _, err := db.conn.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	return nil
}

func (db *database) createPublication(ctx context.Context, name, table string) error {
	_, err := db.conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{table}.Sanitize()))
	if err != nil {
		return fmt.Errorf("create publication %s: %w", name, err)
	}
	return nil
}

// createSlots creates pgoutput slots, one after the other with nothing
// committed in between, so that they all start at the same point.
func (db *database) createSlots(ctx context.Context, names ...string) error {
	for _, n := range names {
		if _, err := db.conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, n); err != nil {
			return fmt.Errorf("create slot %s: %w", n, err)
		}
	}
	return nil
}

// dropSlot drops a slot once its walsender has let go of it, which it does
// a moment after its client exits.
func (db *database) dropSlot(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := db.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.ObjectInUse && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("drop slot %s: %w", name, err)
		}
		return nil
	}
}

// walLSN is the server's current WAL write position.
func (db *database) walLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := db.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(s)
}

// slotActive reports whether a walsender streams from the slot.
func (db *database) slotActive(ctx context.Context, slot string) (bool, error) {
	var active bool
	// The creating session holds a slot too, before its consistent point.
	err := db.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1)`, slot).Scan(&active)
	return active, err
}

// checkPayloads compares what the table holds with what the workload
// generated for a few events: the producer ceiling sends the generated
// bytes, so they must be the bytes the relay reads.
func (db *database) checkPayloads(ctx context.Context, table string, w *workload, seqs ...int) error {
	var e event
	for _, seq := range slices.Compact(seqs) {
		w.fill(seq, &e)
		var got string
		err := db.conn.QueryRow(ctx, fmt.Sprintf(`SELECT payload::text FROM %s WHERE id = $1`, pgx.Identifier{table}.Sanitize()), string(e.id)).Scan(&got)
		if err != nil {
			return fmt.Errorf("read back event %d: %w", seq, err)
		}
		if got != string(e.payload) {
			return fmt.Errorf("event %d: jsonb gives back\n%s\nbut the workload generated\n%s", seq, got, e.payload)
		}
	}
	return nil
}

// serverCPU is the CPU time of every process of the server (the
// postmaster's children: backends, walsenders, background workers), by
// pid.
func (db *database) serverCPU(ctx context.Context) (map[int]time.Duration, error) {
	var backend int
	if err := db.conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, err
	}
	postmaster, err := parentPID(backend)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]time.Duration{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentPID(pid); err != nil || ppid != postmaster {
			continue
		}
		if u, err := procUsage(pid); err == nil {
			out[pid] = u.CPU
		}
	}
	return out, nil
}

// serverCPUSince is the server's CPU time since before was read, counting
// the processes that are still there (a backend that exited in between
// takes its time with it).
func (db *database) serverCPUSince(ctx context.Context, before map[int]time.Duration) (time.Duration, error) {
	now, err := db.serverCPU(ctx)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for pid, cpu := range now {
		total += cpu - before[pid]
	}
	return total, nil
}

func parentPID(pid int) (int, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}
