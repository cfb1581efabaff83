package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// sourceKind is one source under test, with what it can do.
type sourceKind struct {
	name string
	// open returns a source for the table; names holds unique names for
	// the slot, publication and such.
	open func(t testing.TB, url, table, name string) connector.Source
	// ready waits until events committed from now on will be relayed.
	ready func(ctx context.Context, t testing.TB, pool *pgxpool.Pool, name string)
	// features are the behaviours it declares beyond what every source
	// does.
	features Features
	// backlog opens a source that also publishes the rows already in the
	// table when it starts, which each source reads its own way: the CDC
	// source from its slot's exported snapshot (cdc.snapshot initial), the
	// poller by claiming them as it claims any.
	backlog func(t *testing.T, e *env) connector.Source

	// prepare readies the outbox table at url for the binary and the app,
	// as a user does before the first start (the poller's columns).
	prepare func(t testing.TB, url string)
	// binaryConfig is the binary's configuration file for this source,
	// with name for its slot and publication.
	binaryConfig func(url string, brokers []string, name string) string
	// started is what the source logs once it reads the outbox.
	started string
	// deadConn is how the source tells of a silent PostgreSQL connection.
	deadConn deadConnSigns
	// unpublished counts the rows the source's own record still has as
	// unpublished once every event is in Kafka; nil where it keeps no
	// record per row.
	unpublished func(t testing.TB, pool *pgxpool.Pool) int
}

// deadConnSigns is what a source logs about a PostgreSQL connection that
// went silent.
type deadConnSigns struct {
	// warning is the WARN saying the connection is dead.
	warning string
	// bound is the WARN's attribute naming how long PostgreSQL was silent,
	// or the bound it was given, which is postgres.query_timeout or
	// cdc.receive_timeout (both 2s in the tests).
	bound string
	// ended is the WARN saying the relay ended the dead sessions on the
	// server, for a source whose dead sessions hold what other instances
	// need; empty if it has none.
	ended string
	// within is how soon after the drop every event must be in Kafka.
	within time.Duration
}

// instances is how many relays a fault test runs side by side: two where
// the source shares a table among instances, which are failed in turn.
func (k sourceKind) instances() int {
	if k.features.SeveralInstances {
		return 2
	}
	return 1
}

var nameSeq atomic.Int64

// uniqueName is a slot-safe name unique within the test binary; slots are
// per server, and tests share the server.
func uniqueName(t testing.TB) string {
	base := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "_"))
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return fmt.Sprintf("t%d_%s", nameSeq.Add(1), strings.Trim(base, "_"))
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("OUTBOXRELAY_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// relay is a runner working in the background.
type relay struct {
	cancel context.CancelFunc
	done   chan error
}

func startRelay(t testing.TB, src connector.Source, brokers []string, rc connector.RunnerConfig, sc sink.Config) *relay {
	t.Helper()
	return startRelayLogging(t, src, brokers, rc, sc, testLogger(t))
}

// startRelayLogging is startRelay with the sink and runner logging to log.
func startRelayLogging(t testing.TB, src connector.Source, brokers []string, rc connector.RunnerConfig, sc sink.Config, log *slog.Logger) *relay {
	t.Helper()
	sc.Brokers = brokers
	// Tests inject broker errors that make the client refresh metadata
	// before it retries; its 5s production default would make them slow.
	snk, err := sink.New(sc, sink.WithLogger(log), sink.WithClientOptions(kgo.MetadataMinAge(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	if rc.RetryMin == 0 {
		rc.RetryMin, rc.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	}
	r, err := connector.NewRunner(src, snk, rc, connector.WithLogger(log))
	if err != nil {
		t.Fatalf("runner: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rl := &relay{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := r.Run(ctx)
		snk.Close()
		rl.done <- err
	}()
	t.Cleanup(func() { rl.stop(t) })
	return rl
}

// stop stops the relay gracefully and fails the test if it did not stop
// cleanly.
func (r *relay) stop(t testing.TB) {
	t.Helper()
	if r.done == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("relay stopped with an error: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("relay did not stop within a minute")
	}
	r.done = nil
}

// wait returns the relay's error once it stops by itself.
func (r *relay) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done = nil
		return err
	case <-time.After(timeout):
		t.Fatalf("relay did not stop within %s", timeout)
		return nil
	}
}
