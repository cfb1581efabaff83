package localpg_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runOrphanHelper()
		return
	}
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, opts localpg.Options) *localpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv, err := localpg.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func exec1(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestStartConfiguresServer(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Options{Settings: map[string]string{
		"max_connections": "50", // overrides a default
		"work_mem":        "7MB",
	}})
	conn := connect(t, srv.URL("postgres"))

	for setting, want := range map[string]string{
		"wal_level":                 "logical",
		"max_replication_slots":     "100",
		"max_wal_senders":           "100",
		"fsync":                     "off",
		"synchronous_commit":        "off",
		"full_page_writes":          "off",
		"logical_decoding_work_mem": "64kB",
		"shared_buffers":            "64MB",
		"listen_addresses":          "127.0.0.1",
		"server_encoding":           "UTF8",
		"max_connections":           "50",
		"work_mem":                  "7MB",
		"port":                      strconv.Itoa(srv.Port()),
		"data_directory":            filepath.Join(srv.Dir(), "data"),
	} {
		if got := queryString(t, conn, "SHOW "+setting); got != want {
			t.Errorf("SHOW %s = %q, want %q", setting, got, want)
		}
	}
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable", srv.Port()); srv.URL("x") != want {
		t.Errorf("URL(x) = %q, want %q", srv.URL("x"), want)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir(), "postgres.log")); err != nil {
		t.Errorf("server log: %v", err)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir(), ".s.PGSQL."+strconv.Itoa(srv.Port()))); err != nil {
		t.Errorf("unix socket: %v", err)
	}
}

func TestCreateDatabase(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Options{})
	ctx := t.Context()

	url, err := srv.CreateDatabase(ctx, "Mixed Case-db")
	if err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	if url != srv.URL("Mixed Case-db") {
		t.Errorf("CreateDatabase returned %q, want %q", url, srv.URL("Mixed Case-db"))
	}
	conn := connect(t, url)
	if got := queryString(t, conn, "SELECT current_database()"); got != "Mixed Case-db" {
		t.Errorf("current_database() = %q", got)
	}

	if _, err := srv.CreateDatabase(ctx, "Mixed Case-db"); err == nil {
		t.Error("creating the same database twice succeeded")
	}
}

func TestStopRestartKeepsData(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Options{})
	ctx := t.Context()
	url, err := srv.CreateDatabase(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	exec1(t, conn, "CREATE TABLE t (v text); INSERT INTO t VALUES ('before stop')")
	port := srv.Port()

	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, url); err == nil {
		t.Fatal("connected to a stopped server")
	}

	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.Port() != port {
		t.Errorf("port changed from %d to %d", port, srv.Port())
	}
	conn = connect(t, url)
	if got := queryString(t, conn, "SELECT v FROM t"); got != "before stop" {
		t.Errorf("after restart got %q", got)
	}

	// Restart of a running server stops it first.
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart while running: %v", err)
	}
	if got := queryString(t, connect(t, url), "SELECT v FROM t"); got != "before stop" {
		t.Errorf("after second restart got %q", got)
	}
}

func TestKillRestartRecovers(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Options{})
	ctx := t.Context()
	conn := connect(t, srv.URL("postgres"))
	// The server runs with synchronous_commit=off, where a crash may lose
	// the last commits; this one must survive.
	exec1(t, conn, "SET synchronous_commit = on; CREATE TABLE t (v text); INSERT INTO t VALUES ('before crash')")

	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := srv.Kill(); err == nil {
		t.Error("Kill of a killed server succeeded")
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("query on a connection to a killed server succeeded")
	}

	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	conn = connect(t, srv.URL("postgres"))
	if got := queryString(t, conn, "SELECT v FROM t"); got != "before crash" {
		t.Errorf("after crash recovery got %q", got)
	}
	log, err := os.ReadFile(filepath.Join(srv.Dir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "not properly shut down; automatic recovery in progress") {
		t.Errorf("server log shows no crash recovery:\n%s", log)
	}
}

func TestCloseRemovesTempDir(t *testing.T) {
	t.Parallel()
	srv, err := localpg.Start(t.Context(), localpg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir, url := srv.Dir(), srv.URL("postgres")
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s still there after Close: %v", dir, err)
	}
	if _, err := pgx.Connect(t.Context(), url); err == nil {
		t.Error("connected after Close")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := srv.Restart(t.Context()); err == nil {
		t.Error("Restart after Close succeeded")
	}
}

// userDir returns a directory that the OS user postgres can reach when the
// tests run as root (t.TempDir's parents are private to root).
func userDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "localpg-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestUnreachableDirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the directory to another user")
	}
	t.Parallel()
	private := t.TempDir() // mode 0700, owned by root
	_, err := localpg.Start(t.Context(), localpg.Options{Dir: filepath.Join(private, "pg")})
	if err == nil || !strings.Contains(err.Error(), "is not searchable by that user") {
		t.Fatalf("Start in a directory the postgres user cannot reach: got %v", err)
	}
}

func TestGivenDirIsKeptAndReused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(userDir(t), "pg")
	srv, err := localpg.Start(t.Context(), localpg.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", srv.Dir(), dir)
	}
	exec1(t, connect(t, srv.URL("postgres")), "CREATE TABLE kept (v int)")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("data directory not kept: %v", err)
	}

	// Starting again on the same Dir skips initdb and finds the table.
	srv = start(t, localpg.Options{Dir: dir})
	exec1(t, connect(t, srv.URL("postgres")), "SELECT * FROM kept")
}

func TestGivenPortInUse(t *testing.T) {
	t.Parallel()
	first := start(t, localpg.Options{})
	_, err := localpg.Start(t.Context(), localpg.Options{Port: first.Port()})
	if err == nil {
		t.Fatal("second server on the same port started")
	}
	if !strings.Contains(err.Error(), "Address already in use") {
		t.Errorf("error does not carry the server log's reason: %v", err)
	}
}

func TestBadSettingReportsServerLog(t *testing.T) {
	t.Parallel()
	_, err := localpg.Start(t.Context(), localpg.Options{Settings: map[string]string{"no_such_setting": "1"}})
	if err == nil {
		t.Fatal("Start with an unknown setting succeeded")
	}
	if !strings.Contains(err.Error(), `unrecognized configuration parameter "no_such_setting"`) {
		t.Errorf("error does not carry the server log: %v", err)
	}
}

func TestNotInstalled(t *testing.T) {
	t.Setenv(localpg.BinDirEnv, t.TempDir())
	_, err := localpg.Start(t.Context(), localpg.Options{})
	if !errors.Is(err, localpg.ErrNotInstalled) {
		t.Fatalf("Start with an empty %s: got %v, want ErrNotInstalled", localpg.BinDirEnv, err)
	}
	for _, want := range []string{localpg.BinDirEnv, "apt-get install postgresql", "PostgreSQL 13 or newer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

const helperEnv = "LOCALPG_ORPHAN_HELPER_DIR"

// runOrphanHelper runs in a child test process: it starts a server in the
// directory it was given, reports readiness on stdout and waits to be killed.
func runOrphanHelper() {
	_, err := localpg.Start(context.Background(), localpg.Options{Dir: os.Getenv(helperEnv)})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

// TestNoOrphanAfterKilledParent proves that a test binary killed outright
// (as by go test -timeout) takes its server down with it.
func TestNoOrphanAfterKilledParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals exist only on Linux")
	}
	t.Parallel()
	dir := filepath.Join(userDir(t), "pg")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper: %q", line)
	}
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	if !alive(pid) {
		t.Fatalf("postmaster %d is not running while the helper lives", pid)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
			t.Fatalf("postmaster %d outlived its killed parent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs; a zombie (dead, not yet reaped by an init
// that may never reap it) counts as dead.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
