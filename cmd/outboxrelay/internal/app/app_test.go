package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// A PostgreSQL that does not answer at start (behind a load balancer with
// no backend, or overloaded) fails readiness only: the endpoint is served
// while the start-up steps wait for it, /healthz passes, so that Kubernetes
// does not restart the pod in a loop, and /readyz names the step.
func TestRunServesProbesWhileStartupWaitsForPostgres(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		step   string // what /readyz says the relay waits on
	}{
		{
			name:   "poll exactly_once takes an instance number",
			config: "source: poll\nkafka:\n  brokers: [127.0.0.1:1]\n  delivery: exactly_once\n",
			step:   "running: starting: taking a poller instance number",
		},
		{
			name:   "debezium routing reads the column types",
			config: "kafka:\n  brokers: [127.0.0.1:1]\nrouting:\n  value_format: json\n",
			step:   "running: starting: reading the outbox table's column types",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := fmt.Sprintf("postgres:\n  url: postgres://relay@%s/app\n  connect_timeout: 1s\nhttp:\n  listen: 127.0.0.1:0\n%s", testenv.SilentServer(t), tc.config)
			p := filepath.Join(t.TempDir(), "outboxrelay.yaml")
			if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			var log logBuffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(&log, nil))) }()
			defer func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Run after a stop while starting = %v, want nil", err)
					}
				case <-time.After(15 * time.Second):
					t.Errorf("Run did not return within 15s of a stop while starting; log:\n%s", log.String())
				}
			}()

			deadline := time.Now().Add(5 * time.Second)
			addr := ""
			for addr == "" {
				if time.Now().After(deadline) {
					t.Fatalf("no HTTP endpoint within 5s while PostgreSQL does not answer; log:\n%s", log.String())
				}
				time.Sleep(50 * time.Millisecond)
				if m := servingAddr.FindStringSubmatch(log.String()); m != nil {
					addr = m[1]
				}
			}
			var live, ready int
			var readyBody string
			for {
				live, _ = get(t, "http://"+addr+"/healthz")
				ready, readyBody = get(t, "http://"+addr+"/readyz")
				if live == http.StatusOK && ready == http.StatusServiceUnavailable && strings.Contains(readyBody, tc.step) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/healthz %d, /readyz %d:\n%s\nwant /healthz 200 and /readyz 503 with %q while PostgreSQL does not answer; log:\n%s",
						live, ready, readyBody, tc.step, log.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// servingAddr finds the endpoint's address in the text log.
var servingAddr = regexp.MustCompile(`msg="serving /metrics, /healthz and /readyz".* addr=(\S+)`)

// get returns the status and body of a GET of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// logBuffer is a log destination safe to read while the relay writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
