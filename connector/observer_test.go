package connector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// observed is an Observer that logs its calls in the order they came.
type observed struct {
	mu    sync.Mutex
	calls []string
}

func (o *observed) add(s string) {
	o.mu.Lock()
	o.calls = append(o.calls, s)
	o.mu.Unlock()
}

func (o *observed) SourceStarted()          { o.add("started") }
func (o *observed) SourceStopped(err error) { o.add(fmt.Sprintf("stopped: %v", err)) }
func (o *observed) BatchTaken(n int)        { o.add(fmt.Sprintf("taken %d", n)) }
func (o *observed) BatchHandedOver()        { o.add("handed over") }
func (o *observed) DeadLettered(d DeadLetter) {
	o.add(fmt.Sprintf("dead lettered %s (%s): %s", d.EventID, d.Topic, d.Reason))
}
func (o *observed) RunFailed(err error, _ time.Duration) { o.add(fmt.Sprintf("failed: %v", err)) }

// log returns the calls whose text starts with one of prefixes.
func (o *observed) log(prefixes ...string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var got []string
	for _, c := range o.calls {
		for _, p := range prefixes {
			if strings.HasPrefix(c, p) {
				got = append(got, c)
				break
			}
		}
	}
	return got
}

// TestRunnerObserver: the runner tells its Observer of every run of the
// source, with how it ended, of every batch it takes and when it is done
// handing it to the sink, of a dead letter (its id, topic and reason) only
// once Kafka has acknowledged it, and of the failed run it restarts from.
func TestRunnerObserver(t *testing.T) {
	k := newBroker()
	// The first dead letter record is lost on its way; the run fails and
	// the next one sends it again.
	k.outcome = func(m *Message, before int) error {
		if m.Topic == "dlq" && before == 0 {
			return errors.New("broker gone")
		}
		return nil
	}
	o := newOutcomes()
	var mu sync.Mutex
	runs := 0
	bad := Event{ID: "bad", AggregateType: "order", Payload: []byte(`{}`),
		Invalid: &EventError{EventID: "bad", Err: errors.New(`column "aggregateid" is missing or NULL`)}}
	src := script(&runs, &mu, func() []Batch {
		b := batch(o.done("b"))
		b.Events = append(b.Events, bad)
		return []Batch{batch(o.done("a"), "e1", "e2"), b}
	})
	obs := &observed{}
	run := start(t, src, k.sink(), RunnerConfig{DeadLetterTopic: "dlq"}, WithObserver(obs))
	o.wait(t, 4) // a, b! of the first run; a, b of the second
	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := o.list(); !slices.Equal(got, []string{"a", "b!", "a", "b"}) {
		t.Fatalf("Done said %v; want [a b! a b]", got)
	}

	// The runner's goroutine: each batch taken, then handed over; the dead
	// letter acknowledged (inside Publish, with this sink) in the second run
	// only.
	batches := []string{"taken 2", "handed over", "taken 1", "handed over", "taken 2", "handed over", "taken 1",
		`dead lettered bad (): column "aggregateid" is missing or NULL`, "handed over"}
	if got := obs.log("taken", "handed", "dead"); !slices.Equal(got, batches) {
		t.Errorf("batch hooks %q; want %q", got, batches)
	}
	// The source's runs, each started and stopped once: the runner
	// cancelled both, so each returned nil.
	sources := []string{"started", "stopped: <nil>", "started", "stopped: <nil>"}
	if got := obs.log("started", "stopped"); !slices.Equal(got, sources) {
		t.Errorf("source hooks %q; want %q", got, sources)
	}
	// The first run failed on the lost dead letter record, once.
	if got := obs.log("failed"); len(got) != 1 || !strings.Contains(got[0], "broker gone") {
		t.Errorf("RunFailed %q; want the first run's failure, naming the broker's error, once", got)
	}
}

// TestRunnerObserverSourceError: SourceStopped carries what the source's
// Run returned, and RunFailed the failure the runner restarts from, before
// it restarts the source.
func TestRunnerObserverSourceError(t *testing.T) {
	errLost := errors.New("connection reset by peer")
	var mu sync.Mutex
	runs := 0
	src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 1 {
			return errLost
		}
		<-ctx.Done()
		return nil
	}}
	obs := &observed{}
	run := start(t, src, newBroker().sink(), RunnerConfig{}, WithObserver(obs))
	deadline := time.Now().Add(wait)
	for len(obs.log("started")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second run of the source within %s; hooks %q", wait, obs.log(""))
		}
		time.Sleep(time.Millisecond)
	}
	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"started", "stopped: " + errLost.Error(), "failed: " + errLost.Error(), "started", "stopped: <nil>"}
	if got := obs.log("started", "stopped", "failed"); !slices.Equal(got, want) {
		t.Errorf("source hooks %q; want %q", got, want)
	}
}
