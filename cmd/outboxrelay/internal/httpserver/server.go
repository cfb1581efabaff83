package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const (
	// checkTimeout bounds every check of one probe request. Kubernetes
	// probes time out after 1s by default; docs/operations.md suggests 5s.
	checkTimeout = 4 * time.Second
	// shutdownTimeout bounds the wait for requests in progress at stop.
	shutdownTimeout = 5 * time.Second
)

// Check is one part of a health report.
type Check struct {
	Name string
	// Func returns nil when this part is healthy, or what is wrong, in
	// words an operator can act on. It may be called concurrently with
	// itself and other checks; ctx bounds it.
	Func func(ctx context.Context) error
}

// Note is what a check returns when its part is healthy but worth saying:
// the probe passes, and the line says it ("source: ok (standby: ...)").
type Note string

func (n Note) Error() string { return string(n) }

// Config is what the endpoint serves.
type Config struct {
	// Gatherer is scraped on /metrics. Required.
	Gatherer prometheus.Gatherer
	// Live are the checks of /healthz: is the process alive and not
	// wedged. Ready are the checks of /readyz: is it doing its job.
	Live, Ready []Check
	// Status, when set, says where the relay stands, for the status page
	// on / and its JSON on /status (the Ready checks are added to it);
	// without, / lists the endpoints. It may be called concurrently with
	// itself; ctx bounds it.
	Status func(ctx context.Context) Status
}

// Server is the HTTP endpoint.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// Listen binds addr, so that a port already in use is an error at start
// and not later, and returns the server; [Server.Serve] serves it.
func Listen(addr string, cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Gatherer == nil {
		return nil, errors.New("httpserver: no gatherer")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w", addr, err)
	}
	log = log.With("component", "http")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	}))
	mux.Handle("GET /healthz", probe(cfg.Live))
	mux.Handle("GET /readyz", probe(cfg.Ready))
	if cfg.Status != nil {
		mux.Handle("GET /{$}", statusPage(cfg))
		mux.Handle("GET /status", statusJSON(cfg))
	} else {
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, "outboxrelay\n/metrics  Prometheus metrics\n/healthz  liveness: alive and not wedged\n/readyz   readiness: connected to PostgreSQL and Kafka and making progress\n")
		})
	}
	return &Server{
		ln:  ln,
		log: log,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			WriteTimeout:      time.Minute,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Addr is the address the server listens on (with the port chosen when
// the configured one was 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx is done, then waits for the requests in progress
// (a few seconds at most) and returns. It returns an error only when
// serving fails.
func (s *Server) Serve(ctx context.Context) error {
	s.log.Info("serving /metrics, /healthz and /readyz", "addr", s.Addr())
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http endpoint: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http endpoint: %w", err)
	}
	return nil
}

// probe answers 200 when every check passes and 503 otherwise, with a line
// per check.
func probe(checks []Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		var b strings.Builder
		failed := false
		for _, res := range runChecks(ctx, checks) {
			switch {
			case res.OK && res.Message != "":
				fmt.Fprintf(&b, "%s: ok (%s)\n", res.Name, res.Message)
			case !res.OK:
				failed = true
				fmt.Fprintf(&b, "%s: %s\n", res.Name, res.Message)
			default:
				fmt.Fprintf(&b, "%s: ok\n", res.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "FAIL\n", b.String())
			return
		}
		fmt.Fprint(w, "ok\n", b.String())
	})
}

// runChecks runs checks at once and returns their results in order: a
// [Note] passes with its text as the message.
func runChecks(ctx context.Context, checks []Check) []CheckResult {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() { errs[i] = c.Func(ctx) })
	}
	wg.Wait()
	out := make([]CheckResult, len(checks))
	for i, c := range checks {
		var note Note
		out[i] = CheckResult{Name: c.Name, OK: errs[i] == nil}
		switch {
		case errors.As(errs[i], &note):
			out[i].OK, out[i].Message = true, string(note)
		case errs[i] != nil:
			out[i].Message = errs[i].Error()
		}
	}
	return out
}

// Cached returns c answering from its last result for up to maxAge, so
// that probes arriving together do not each reach a remote service.
func Cached(c Check, maxAge time.Duration) Check {
	var (
		mu   sync.Mutex
		at   time.Time
		last error
	)
	return Check{Name: c.Name, Func: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < maxAge {
			return last
		}
		last, at = c.Func(ctx), time.Now()
		return last
	}}
}
