package httpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "outboxrelay_test_total", Help: "A test counter."})
	c.Add(3)
	reg.MustRegister(c)
	var pgDown atomic.Bool
	pgDown.Store(true)
	srv, err := Listen("127.0.0.1:0", Config{
		Gatherer: reg,
		Live:     []Check{{Name: "progress", Func: func(context.Context) error { return nil }}},
		Ready: []Check{
			{Name: "postgres", Func: func(context.Context) error {
				if pgDown.Load() {
					return errors.New("PostgreSQL does not answer: connection refused")
				}
				return nil
			}},
			{Name: "kafka", Func: func(context.Context) error { return nil }},
		},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	base := "http://" + srv.Addr()

	for _, c := range []struct {
		name, path string
		status     int
		body       []string
	}{
		{"live", "/healthz", 200, []string{"ok\n", "progress: ok\n"}},
		{"not ready", "/readyz", 503, []string{"FAIL\n", "postgres: PostgreSQL does not answer: connection refused\n", "kafka: ok\n"}},
		{"metrics", "/metrics", 200, []string{"# TYPE outboxrelay_test_total counter", "outboxrelay_test_total 3"}},
		{"index", "/", 200, []string{"/readyz"}},
		{"unknown", "/nope", 404, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := get(t, base+c.path)
			if status != c.status {
				t.Errorf("GET %s = %d, want %d; body:\n%s", c.path, status, c.status, body)
			}
			for _, want := range c.body {
				if !strings.Contains(body, want) {
					t.Errorf("GET %s body lacks %q:\n%s", c.path, want, body)
				}
			}
		})
	}
	pgDown.Store(false)
	if status, body := get(t, base+"/readyz"); status != 200 || body != "ok\npostgres: ok\nkafka: ok\n" {
		t.Errorf("GET /readyz once PostgreSQL answers = %d %q", status, body)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil after the stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx was cancelled")
	}
}

func TestListenPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Listen(ln.Addr().String(), Config{Gatherer: prometheus.NewRegistry()}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "http.listen "+ln.Addr().String()) {
		t.Errorf("Listen on a port in use = %v, want an error naming http.listen and the address", err)
	}
}

func TestCached(t *testing.T) {
	var calls atomic.Int32
	c := Cached(Check{Name: "kafka", Func: func(context.Context) error {
		calls.Add(1)
		return errors.New("down")
	}}, time.Hour)
	for range 3 {
		if err := c.Func(context.Background()); err == nil || err.Error() != "down" {
			t.Errorf("cached check = %v, want the check's own error", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the check ran %d times within its max age, want 1", n)
	}
	if c.Name != "kafka" {
		t.Errorf("name = %q", c.Name)
	}
}
