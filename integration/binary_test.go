package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// binary is the outboxrelay binary, built once per test binary.
func binary(t testing.TB) string { return testenv.Binary(t) }

// proc is the outboxrelay binary running as a child process.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// runBinary starts `outboxrelay run --config FILE` with config as the
// file's content.
func runBinary(t testing.TB, config string, env ...string) *proc {
	t.Helper()
	return startBinary(t, []string{"run", "--config", writeTemp(t, "outboxrelay.yaml", config)}, env...)
}

// writeTemp writes content to a file of that name in a fresh temporary
// directory and returns its path.
func writeTemp(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBinary starts the outboxrelay binary with args and the test's
// environment plus env. It dies with the test binary, is killed at the
// test's end if still running, and its output is logged if the test failed.
func startBinary(t testing.TB, args []string, env ...string) *proc {
	t.Helper()
	return startBinaryAt(t, binary(t), args, env...)
}

// startBinaryAt is startBinary of the outboxrelay binary at path.
func startBinaryAt(t testing.TB, path string, args []string, env ...string) *proc {
	t.Helper()
	p := &proc{out: &syncBuffer{}}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("outboxrelay output:\n%s", p.out.String())
		}
	})
	return p
}

// signal sends sig and waits for the process to exit, returning its exit
// code.
func (p *proc) signal(t testing.TB, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("outboxrelay did not exit within %s of %v", timeout, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// exit waits for the process to exit by itself and returns its exit code.
func (p *proc) exit(t testing.TB, timeout time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("outboxrelay did not exit within %s", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

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

// yamlConfig is a minimal config for the binary.
func yamlConfig(url string, brokers []string, extra string) string {
	// Any free port for the HTTP endpoint: instances run side by side.
	return fmt.Sprintf("postgres:\n  url: %q\nkafka:\n  brokers: [%s]\nlog:\n  level: info\n  format: text\nhttp:\n  listen: 127.0.0.1:0\n%s",
		url, strings.Join(brokers, ", "), extra)
}

// cdcYAML is the cdc section naming slot and publication name.
func cdcYAML(name string) string {
	return fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n", name, name)
}

// vmHWM reads a process's peak resident set size (VmHWM) from /proc, in
// bytes; ok is false where /proc does not say.
func vmHWM(pid int) (hwm int64, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// peakRSS is the relay's peak resident memory in bytes; the test skips
// where /proc does not say.
func peakRSS(t testing.TB, p *proc) int64 {
	t.Helper()
	hwm, ok := vmHWM(p.cmd.Process.Pid)
	if !ok {
		t.Skip("no VmHWM in /proc/PID/status to read the relay's peak memory from")
	}
	return hwm
}

// stopReason is the error the process stopped with: the err of its last
// record, which must be the ERROR "outboxrelay stopped", in either log
// format.
func (p *proc) stopReason(t testing.TB) string {
	t.Helper()
	last := lastLines(strings.TrimSpace(p.out.String()), 1)
	var rec map[string]any
	if json.Unmarshal([]byte(last), &rec) == nil {
		if rec["level"] == "ERROR" && rec["msg"] == "outboxrelay stopped" {
			msg, _ := rec["err"].(string)
			return msg
		}
	} else if m := textStopRecord.FindStringSubmatch(last); m != nil {
		if msg, err := strconv.Unquote(m[1]); err == nil {
			return msg
		}
	}
	t.Fatalf("the last line is not the ERROR record of the stop: %s", last)
	return ""
}

// textStopRecord is the text format's ERROR record of a stop.
var textStopRecord = regexp.MustCompile(`level=ERROR msg="outboxrelay stopped" .*\berr=("(?:[^"\\]|\\.)*")$`)
