package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildRelay builds cmd/outboxrelay into dir, as docker/Dockerfile builds
// it, and returns the binary's path. A binary linked to the C library
// maps it too: 1.5 MiB more of its peak RSS came from files.
func buildRelay(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "outboxrelay")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/outboxrelay/outboxrelay/cmd/outboxrelay")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build outboxrelay (run from the module, or pass -relay-bin): %w\n%s", err, out)
	}
	return bin, nil
}

// relayConfig is an outboxrelay configuration file.
type relayConfig struct {
	url     string
	table   string
	brokers []string
	source  string // the source's own section, YAML at top level
	// delivery is kafka.delivery; empty: the default.
	delivery string
	// httpAddr is http.listen; empty: any free port.
	httpAddr string
	// cpus pins the relay's process to these CPUs; none: any.
	cpus []int
	// headers sets routing.headers_column (Config.Tracing); otlp, when
	// set, is the OTLP/HTTP endpoint the relay exports spans to.
	headers bool
	otlp    string
}

func (c relayConfig) yaml() string {
	// Any free port for the HTTP endpoint, so relays can run side by side.
	delivery := ""
	if c.delivery != "" {
		delivery = "\n  delivery: " + c.delivery
	}
	addr := cmp.Or(c.httpAddr, "127.0.0.1:0")
	routing := ""
	if c.headers {
		routing = "routing:\n  headers_column: headers\n"
	}
	return fmt.Sprintf("postgres:\n  url: %q\noutbox:\n  table: %s\nkafka:\n  brokers: [%s]%s\nlog:\n  level: warn\nhttp:\n  listen: %s\n%s%s",
		c.url, c.table, strings.Join(c.brokers, ", "), delivery, addr, routing, c.source)
}

// relayProc is a relay running as a child process.
type relayProc struct {
	cmd     *exec.Cmd
	out     *syncBuffer
	log     *os.File // a copy of out, when asked for
	started time.Time
	done    chan struct{} // closed once the process has exited
	err     error         // cmd.Wait's result, once done is closed
}

// startRelay runs command (the binary and its subcommand, `outboxrelay
// run`) with --config FILE, cfg written to FILE in dir. With logDir set, its
// output is also kept in logDir/name.log.
func startRelay(command []string, cfg relayConfig, dir, logDir, name string) (*relayProc, error) {
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg.yaml()), 0o600); err != nil {
		return nil, err
	}
	p := &relayProc{out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(command[0], append(command[1:len(command):len(command)], "--config", path)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if cfg.otlp != "" {
		p.cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+cfg.otlp)
	}
	if logDir != "" {
		f, err := os.Create(filepath.Join(logDir, name+".log"))
		if err != nil {
			return nil, err
		}
		p.log = f
		w := io.MultiWriter(p.out, f)
		p.cmd.Stdout, p.cmd.Stderr = w, w
	}
	// The relay dies with the benchmark, whatever happens to it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.started = time.Now()
	if err := startPinned(p.cmd, cfg.cpus); err != nil {
		if p.log != nil {
			p.log.Close()
		}
		return nil, fmt.Errorf("start the relay %s: %w", command[0], err)
	}
	go func() {
		p.err = p.cmd.Wait() // returns once the output is copied
		if p.log != nil {
			p.log.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// exited returns an error describing the exit if the process has ended.
func (p *relayProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("the relay exited (%v); its output:\n%s", p.err, p.out.String())
	default:
		return nil
	}
}

// usage is what /proc says the process has used so far.
type usage struct {
	PeakRSSKiB int64 // VmHWM
	// AnonKiB and FileKiB are the resident set now, split into the
	// process's own memory (heap, stacks, the runtime's) and the pages of
	// files it maps, its binary's mostly: clean, shared with the page
	// cache, and the kernel's to drop.
	AnonKiB, FileKiB int64
	CPU              time.Duration // utime + stime, all threads
	// Switches counts the context switches of every thread still alive,
	// voluntary and not: a wakeup costs one.
	Switches int64
	// Syscalls counts the read and write calls of every thread (syscr
	// and syscw in /proc/<pid>/io), socket reads and writes among them.
	Syscalls int64
}

func (p *relayProc) usage() (usage, error) {
	return procUsage(p.cmd.Process.Pid)
}

// procMemory is the memory part of procUsage, cheap enough to sample:
// one read of /proc/<pid>/status.
func procMemory(pid int) (usage, error) {
	n, err := procFields(fmt.Sprintf("/proc/%d/status", pid), "VmHWM", "RssAnon", "RssFile")
	if err != nil {
		return usage{}, fmt.Errorf("read the relay's memory use: %w", err)
	}
	return usage{PeakRSSKiB: n["VmHWM"], AnonKiB: n["RssAnon"], FileKiB: n["RssFile"]}, nil
}

// procFields reads the named "key: number [kB]" lines of a /proc file.
func procFields(path string, keys ...string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	n := make(map[string]int64, len(keys))
	for line := range strings.Lines(string(b)) {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(keys, key) {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %s in %s: %w", line, path, err)
		}
		n[key] = v
	}
	return n, nil
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture, whatever the kernel's HZ.
const clockTick = 10 * time.Millisecond

func procUsage(pid int) (usage, error) {
	u, err := procMemory(pid)
	if err != nil {
		return u, err
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		// A thread that ended has no file any more, and no count.
		n, _ := procFields(t, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
		u.Switches += n["voluntary_ctxt_switches"] + n["nonvoluntary_ctxt_switches"]
	}
	if n, err := procFields(fmt.Sprintf("/proc/%d/io", pid), "syscr", "syscw"); err == nil {
		u.Syscalls = n["syscr"] + n["syscw"]
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("read the relay's CPU time: %w", err)
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("parse /proc/%d/stat: %q", pid, stat)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return u, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	u.CPU = time.Duration(ut+st) * clockTick
	return u, nil
}

// stop asks the relay to stop (SIGTERM, a graceful stop) and waits.
func (p *relayProc) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return fmt.Errorf("the relay had already exited (%v); its output:\n%s", p.err, p.out.String())
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("the relay stopped with %v; its output:\n%s", p.err, p.out.String())
		}
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the relay did not stop within %s of SIGTERM; its output:\n%s", timeout, p.out.String())
	}
}

// logged returns the relay's log lines (warnings and errors: it runs with
// log.level=warn), at most max of them and how many there were in all.
func (p *relayProc) logged(max int) (lines []string, total int) {
	for line := range strings.Lines(p.out.String()) {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		total++
		if len(lines) < max {
			lines = append(lines, line)
		}
	}
	return lines, total
}

// kill ends the process at once, for error paths.
func (p *relayProc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep the last 64 KiB: enough to explain a failure.
	if s.b.Len() > 64<<10 {
		rest := s.b.Bytes()[s.b.Len()-32<<10:]
		s.b = *bytes.NewBuffer(append([]byte(nil), rest...))
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// selfCPU is this process's user+system time so far: the in-process broker
// and the benchmark's own polling.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
