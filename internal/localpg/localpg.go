package localpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Options configures Start. The zero value starts a server in a new temporary
// directory on a free port.
type Options struct {
	// Dir holds the data directory (Dir/data), the Unix socket and the server
	// log (Dir/postgres.log). Default: a new temporary directory, removed by
	// Close. A Dir given here is created if missing and kept by Close; if it
	// already holds a data directory from an earlier Start, that data is
	// started again without initdb.
	Dir string
	// Port is the TCP port on 127.0.0.1. Default: a free port picked at
	// start. A given Port that is taken makes Start fail.
	Port int
	// Settings are extra postgresql.conf settings. They override
	// DefaultSettings: wal_level=logical, max_replication_slots=100,
	// max_wal_senders=100, fsync=off, synchronous_commit=off,
	// full_page_writes=off, max_connections=200,
	// logical_decoding_work_mem=64kB, shared_buffers=64MB. port,
	// listen_addresses and unix_socket_directories are set by Start and
	// cannot be overridden.
	Settings map[string]string
	// Logger receives the server's lifecycle events (not its log, which goes
	// to Dir/postgres.log). Default: discard.
	Logger *slog.Logger
}

// defaultSettings favour speed over durability: the data is thrown away.
var defaultSettings = map[string]string{
	"wal_level":             "logical",
	"max_replication_slots": "100",
	"max_wal_senders":       "100",
	"fsync":                 "off",
	"synchronous_commit":    "off",
	"full_page_writes":      "off",
	"max_connections":       "200",
	// The smallest value PostgreSQL accepts: tests make the decoder spill or
	// stream a transaction with a few hundred rows instead of megabytes.
	"logical_decoding_work_mem": "64kB",
	"shared_buffers":            "64MB",
}

// DefaultSettings returns the postgresql.conf settings that Start uses
// unless Options.Settings overrides them, for callers that start PostgreSQL
// another way (a container) and want the same server. The map is a copy.
func DefaultSettings() map[string]string { return maps.Clone(defaultSettings) }

const (
	// superuser is the role initdb creates; every connection uses it.
	superuser = "postgres"
	// startTimeout bounds how long Start and Restart wait for the server to
	// accept connections; it normally takes well under a second.
	startTimeout = time.Minute
	// portAttempts is how often Start picks a new free port when another
	// process took the one it picked before postgres could bind it.
	portAttempts = 3
	// restartRetryWindow is how long Restart keeps retrying a server that
	// exits during startup: a backend that outlived its postmaster (say,
	// one killed from outside) stays attached to the shared memory for a
	// moment, and until it detaches a new postmaster refuses to start.
	restartRetryWindow = 15 * time.Second
	// closeTimeout bounds the shutdown in Close.
	closeTimeout = 15 * time.Second
	// maxSocketPath keeps the Unix socket path under the kernel's limit of
	// 108 bytes (sun_path) with room for the lock file suffix.
	maxSocketPath = 100
)

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("port already in use")

// errExited marks a start in which postgres exited before accepting
// connections (as opposed to one that timed out).
var errExited = errors.New("postgres exited during startup")

// Server is a PostgreSQL server started by Start. Its methods may be called
// concurrently; lifecycle calls (Stop, Restart, Kill, Close) are serialised.
type Server struct {
	binDir  string
	major   int
	dir     string
	dataDir string
	logPath string
	port    int
	ownsDir bool
	args    []string // postgres arguments, without the port
	cred    *credential
	logger  *slog.Logger

	mu       sync.Mutex
	proc     *process // nil while the server is stopped
	closed   bool
	closeErr error
}

// process is one run of the postmaster.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result; read it only after done is closed
}

// Start initialises a data directory (unless Options.Dir already holds one)
// and starts PostgreSQL on it, returning once the server accepts
// connections. The server keeps running when ctx ends; ctx bounds only the
// start. Call Close to stop it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "localpg")

	binDir, want, err := findBinDir(ctx)
	if err != nil {
		return nil, err
	}
	major, err := checkVersion(ctx, binDir)
	if err != nil {
		return nil, err
	}
	if want != 0 && major != want {
		return nil, fmt.Errorf("%s=%d, but %s is PostgreSQL %d: point %s at PostgreSQL %d's bin directory, or unset one of them",
			MajorEnv, want, binDir, major, BinDirEnv, want)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}

	s := &Server{binDir: binDir, major: major, cred: cred, logger: logger}
	if opts.Dir == "" {
		if s.dir, err = os.MkdirTemp("", "outboxrelay-localpg-"); err != nil {
			return nil, fmt.Errorf("create temporary directory: %w", err)
		}
		s.ownsDir = true
	} else {
		if s.dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("resolve directory %q: %w", opts.Dir, err)
		}
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, fmt.Errorf("create directory: %w", err)
		}
	}
	if err := s.boot(ctx, opts); err != nil {
		if s.ownsDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}
	logger.InfoContext(ctx, "postgres started",
		"version", major, "port", s.port, "dir", s.dir, "log", s.logPath)
	return s, nil
}

// boot prepares s.dir, runs initdb if needed and starts the server.
func (s *Server) boot(ctx context.Context, opts Options) error {
	if s.cred != nil {
		// The server runs as another user and writes its socket, lock file
		// and data below dir.
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("hand directory %s to OS user %s: %w", s.dir, superuser, err)
		}
		if err := checkReachable(s.dir, s.cred); err != nil {
			return err
		}
	}
	s.dataDir = filepath.Join(s.dir, "data")
	s.logPath = filepath.Join(s.dir, "postgres.log")

	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err != nil {
		if err := s.initdb(ctx); err != nil {
			return err
		}
	}
	s.args = s.serverArgs(opts.Settings)

	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		p, err := s.start(ctx, port)
		if err == nil {
			s.port, s.proc = port, p
			return nil
		}
		if opts.Port != 0 || attempt == portAttempts || !errors.Is(err, errAddrInUse) {
			return err
		}
		s.logger.DebugContext(ctx, "port taken before postgres bound it, picking another", "port", port)
	}
}

// URL returns the connection URL of database dbname as the superuser
// postgres, over TCP without TLS.
func (s *Server) URL(dbname string) string { return connURL(s.port, dbname) }

func connURL(port int, dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the server listens on, on 127.0.0.1. It stays
// the same across Restart.
func (s *Server) Port() int { return s.port }

// Dir returns the directory holding the data directory (Dir()/data), the
// Unix socket and the server log (Dir()/postgres.log).
func (s *Server) Dir() string { return s.dir }

// CreateDatabase creates database name and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.New("create database: empty name")
	}
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("create database %q: connect: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %q: %w", name, err)
	}
	return s.URL(name), nil
}

// Stop shuts the server down ("fast" shutdown: open transactions are rolled
// back, clients disconnected) and keeps its data for Restart. If ctx ends
// first the server is killed and Stop returns ctx's error. Stopping a stopped
// server does nothing.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(ctx)
}

// Restart starts the server again on the same port and data, stopping it
// first if it is running. It returns once the server accepts connections.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("restart postgres: server is closed")
	}
	if err := s.stopLocked(ctx); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	deadline := time.Now().Add(restartRetryWindow)
	for {
		p, err := s.start(ctx, s.port)
		if err == nil {
			s.proc = p
			s.logger.InfoContext(ctx, "postgres restarted", "port", s.port)
			return nil
		}
		if !errors.Is(err, errExited) || time.Now().After(deadline) {
			return fmt.Errorf("restart postgres: %w", err)
		}
		s.logger.DebugContext(ctx, "postgres exited during restart, retrying", "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("restart postgres: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to the postmaster and its backends, as a crash of the
// host would, and waits for the postmaster to exit: every client connection
// breaks at once. Restart then runs crash recovery. Kill returns an error if
// the server is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return errors.New("kill postgres: server is not running")
	}
	s.proc = nil
	if err := killTree(p.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill postgres: %w", err)
	}
	<-p.done
	s.logger.Info("postgres killed", "port", s.port)
	return nil
}

// Close stops the server and removes its directory if Start created it.
// Calling Close again returns the first call's result.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closeErr
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := s.stopLocked(ctx)
	if s.ownsDir {
		if rmErr := os.RemoveAll(s.dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove directory: %w", rmErr))
		}
	}
	if err != nil {
		s.closeErr = fmt.Errorf("close postgres: %w", err)
	}
	return s.closeErr
}

func (s *Server) stopLocked(ctx context.Context) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	// SIGINT asks for a fast shutdown. It can still wait on a WAL sender
	// whose client stopped reading, hence the escalation when ctx ends:
	// SIGQUIT (immediate shutdown, which also stops the backends), then
	// SIGKILL.
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("stop postgres: %w; server log %s:\n%s", p.err, s.logPath, s.logTail(0))
		}
		s.logger.InfoContext(ctx, "postgres stopped", "port", s.port)
		return nil
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Signal(quitSignal)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return fmt.Errorf("stop postgres: no fast shutdown before %w, forced it", context.Cause(ctx))
}

// initdb creates the data directory.
func (s *Server) initdb(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"),
		"-D", s.dataDir,
		"--no-sync",
		"-U", superuser,
		"-A", "trust",
		"--encoding", "UTF8",
		// The C locale exists everywhere; the environment's may not be
		// installed, which makes initdb fail.
		"--no-locale",
	)
	cmd.Dir = s.dir
	cmd.Env = s.env()
	cmd.SysProcAttr = sysProcAttr(s.cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w:\n%s", s.dataDir, err, out)
	}
	return nil
}

// serverArgs returns the postgres command line, less the port.
func (s *Server) serverArgs(extra map[string]string) []string {
	settings := maps.Clone(defaultSettings)
	maps.Copy(settings, extra)
	settings["listen_addresses"] = "127.0.0.1"
	settings["unix_socket_directories"] = `"` + s.dir + `"`
	if len(filepath.Join(s.dir, ".s.PGSQL.65535.lock")) > maxSocketPath {
		// Clients here use TCP; a socket path the kernel would reject
		// would only stop the server from starting.
		settings["unix_socket_directories"] = ""
	}
	args := []string{"-D", s.dataDir}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// start runs the postmaster on port and waits until it accepts connections.
// On failure the process has exited.
func (s *Server) start(ctx context.Context, port int) (*process, error) {
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	fi, err := logFile.Stat()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("open server log: %w", err)
	}
	logFrom := fi.Size()

	// Not CommandContext: the server outlives the ctx of Start.
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"),
		append(slices.Clone(s.args), "-c", "port="+strconv.Itoa(port))...)
	cmd.Dir = s.dir
	cmd.Env = s.env()
	// An *os.File is handed to the child as is: no copying goroutine.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr(s.cred)
	err = cmd.Start()
	logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	if err := s.waitReady(ctx, p, port, logFrom); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, err
	}
	return p, nil
}

// waitReady polls until the server on port accepts connections, it exits, or
// ctx or startTimeout ends.
func (s *Server) waitReady(ctx context.Context, p *process, port int, logFrom int64) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	var lastErr error
	for {
		lastErr = s.probe(ctx, connURL(port, "postgres"))
		if lastErr == nil {
			return nil
		}
		select {
		case <-p.done:
			tail := s.logTail(logFrom)
			err := fmt.Errorf("%w (%v); server log %s:\n%s", errExited, p.err, s.logPath, tail)
			if strings.Contains(tail, "Address already in use") {
				err = fmt.Errorf("port %d: %w: %w", port, errAddrInUse, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections on port %d: %w (last error: %v); server log %s:\n%s",
				port, ctx.Err(), lastErr, s.logPath, s.logTail(logFrom))
		case <-ticker.C:
		}
	}
}

// probe connects once and checks that the server answering is this one and
// not another that holds the port, which would make a failed start look
// ready until our postmaster gives up binding.
func (s *Server) probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	results, err := conn.Exec(ctx, "SHOW data_directory").ReadAll()
	if err != nil {
		return err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 {
		return errors.New("SHOW data_directory returned no row")
	}
	if got := string(results[0].Rows[0][0]); got != s.dataDir {
		return fmt.Errorf("port is served by another server, with data directory %s", got)
	}
	return nil
}

// env is the environment of initdb and postgres: the caller's, less the
// libpq variables that could point them elsewhere, in the C locale so that
// their messages are in English.
func (s *Server) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// logTail returns up to the last 4 KiB the server logged since offset from.
func (s *Server) logTail(from int64) string {
	const maxTail = 4 << 10
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(server log unreadable: %v)", err)
	}
	start := max(from, fi.Size()-maxTail)
	buf := make([]byte, fi.Size()-start)
	n, _ := f.ReadAt(buf, start)
	tail := string(buf[:n])
	if start > from {
		// Drop the partial first line.
		if i := strings.IndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:]
		}
	}
	return strings.TrimRight(tail, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process can take it before postgres binds it; Start retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
