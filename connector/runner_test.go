package connector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// The fakes: each method is a function field, so a case replaces one
// behaviour (a Flush that never ends, a Commit that fails) and keeps the
// rest.

type fakeSource struct {
	run func(ctx context.Context, out chan<- Batch) error
}

func (f fakeSource) Run(ctx context.Context, out chan<- Batch) error { return f.run(ctx, out) }

type fakeSink struct {
	publish func(ctx context.Context, m *Message, done func(error)) error
	flush   func(ctx context.Context) error
	abort   func(ctx context.Context) error
}

func (f fakeSink) Publish(ctx context.Context, m *Message, done func(error)) error {
	return f.publish(ctx, m, done)
}
func (f fakeSink) Flush(ctx context.Context) error { return f.flush(ctx) }
func (f fakeSink) Abort(ctx context.Context) error { return f.abort(ctx) }

type fakeTxnSink struct {
	fakeSink
	commit func(ctx context.Context, mark *Message) error
}

func (fakeTxnSink) Transactions() bool { return true }
func (f fakeTxnSink) Commit(ctx context.Context, mark *Message) error {
	return f.commit(ctx, mark)
}

// wait bounds every wait of these tests: long enough for a loaded machine,
// short enough that a hang fails instead of stalling the suite.
const wait = 30 * time.Second

// errAborted is the fake sink's outcome for a message it aborted.
var errAborted = errors.New("aborted")

// broker is the state behind the fake sinks: what was published and
// committed, and the calls made, in order. outcome decides each message's
// fate by the number of times its event was published before (0 the
// first time); nil acknowledges everything. limit, when set, is a size
// limit per topic that Publish checks, as the Kafka sink does, refusing a
// larger record before sending it.
type broker struct {
	outcome func(m *Message, before int) error
	limit   map[string]int
	// hold keeps each acknowledgement until ack, Flush or Abort; without
	// it a plain sink acknowledges inside Publish.
	hold bool

	mu        sync.Mutex
	calls     []string
	published []Message // every message handed over, copied
	committed []Message // in a transaction, what commits made visible
	marks     []*Message
	times     map[string]int
	pending   []pendingAck
	txnFailed error // a message of the open transaction was refused
	signal    chan struct{}
}

type pendingAck struct {
	m    Message
	done func(error)
	err  error
}

func newBroker() *broker {
	return &broker{times: map[string]int{}, signal: make(chan struct{}, 1)}
}

// call logs a call; the caller holds mu.
func (k *broker) call(s string) {
	k.calls = append(k.calls, s)
	select {
	case k.signal <- struct{}{}:
	default:
	}
}

// until waits for cond, checked under mu after every call.
func (k *broker) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(wait)
	for {
		k.mu.Lock()
		ok := cond()
		k.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-k.signal:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			k.mu.Lock()
			defer k.mu.Unlock()
			t.Fatalf("waited %s for %s; calls: %v", wait, what, k.calls)
		}
	}
}

func (k *broker) callLog() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls)
}

func copyMessage(m *Message) Message {
	c := *m
	c.Headers = slices.Clone(m.Headers)
	return c
}

// accept takes m, the caller holding mu: refused is the size check's
// refusal (m was not sent), err the outcome it will be acknowledged with.
func (k *broker) accept(m *Message) (c Message, refused, err error) {
	c = copyMessage(m)
	if lim, ok := k.limit[m.Topic]; ok && m.Size() > lim {
		k.call("refuse " + m.Topic + "/" + m.EventID)
		return c, &EventError{EventID: m.EventID, Err: &RecordTooLargeError{Size: m.Size(), Limit: lim}}, nil
	}
	k.call("publish " + m.Topic + "/" + m.EventID)
	k.published = append(k.published, c)
	if k.outcome != nil {
		err = k.outcome(m, k.times[m.Topic+"/"+m.EventID])
	}
	k.times[m.Topic+"/"+m.EventID]++
	return c, nil, err
}

// sink is a plain (at least once) sink on k.
func (k *broker) sink() fakeSink {
	return fakeSink{
		publish: func(ctx context.Context, m *Message, done func(error)) error {
			k.mu.Lock()
			c, refused, err := k.accept(m)
			if refused != nil {
				k.mu.Unlock()
				return refused
			}
			if k.hold {
				k.pending = append(k.pending, pendingAck{m: c, done: done, err: err})
				k.mu.Unlock()
				return nil
			}
			k.mu.Unlock()
			done(err)
			return nil
		},
		flush: func(ctx context.Context) error {
			k.mu.Lock()
			k.call("flush")
			k.mu.Unlock()
			k.ack(func(Message) bool { return true })
			return nil
		},
		abort: func(ctx context.Context) error {
			k.mu.Lock()
			k.call("abort")
			p := k.pending
			k.pending = nil
			k.mu.Unlock()
			for _, a := range p {
				a.done(errAborted)
			}
			return nil
		},
	}
}

// ack acknowledges the held messages that which selects, with their
// outcomes, in the order they were published.
func (k *broker) ack(which func(Message) bool) {
	k.mu.Lock()
	var now, keep []pendingAck
	for _, a := range k.pending {
		if which(a.m) {
			now = append(now, a)
		} else {
			keep = append(keep, a)
		}
	}
	k.pending = keep
	k.mu.Unlock()
	for _, a := range now {
		a.done(a.err)
	}
}

// txnSink is a transactional sink on k: a refusal fails its message at
// once and dooms the transaction; every other message is acknowledged by
// the commit.
func (k *broker) txnSink() fakeTxnSink {
	return fakeTxnSink{
		fakeSink: fakeSink{
			publish: func(ctx context.Context, m *Message, done func(error)) error {
				k.mu.Lock()
				c, refused, err := k.accept(m)
				if refused != nil {
					k.mu.Unlock()
					return refused
				}
				if err != nil {
					if k.txnFailed == nil {
						k.txnFailed = err
					}
					k.mu.Unlock()
					done(err)
					return nil
				}
				k.pending = append(k.pending, pendingAck{m: c, done: done})
				k.mu.Unlock()
				return nil
			},
			flush: func(ctx context.Context) error {
				k.mu.Lock()
				k.call("flush")
				k.mu.Unlock()
				return nil
			},
			abort: func(ctx context.Context) error {
				k.mu.Lock()
				k.call("abort")
				k.mu.Unlock()
				k.endTxn(errAborted)
				return nil
			},
		},
		commit: func(ctx context.Context, mark *Message) error {
			k.mu.Lock()
			if failed := k.txnFailed; failed != nil {
				// As the Kafka sink: the refusal is why the commit fails.
				k.call("commit refused")
				k.mu.Unlock()
				err := fmt.Errorf("a record of the Kafka transaction was refused, so it is aborted: %w", failed)
				k.endTxn(fmt.Errorf("%w: %w", errAborted, err))
				return err
			}
			name := "<nil>"
			if mark != nil {
				name = string(mark.Value)
				c := copyMessage(mark)
				k.marks = append(k.marks, &c)
			} else {
				k.marks = append(k.marks, nil)
			}
			k.call("commit " + name)
			for _, a := range k.pending {
				k.committed = append(k.committed, a.m)
			}
			k.mu.Unlock()
			k.endTxn(nil)
			return nil
		},
	}
}

// endTxn settles the open transaction's messages with err.
func (k *broker) endTxn(err error) {
	k.mu.Lock()
	p := k.pending
	k.pending = nil
	k.txnFailed = nil
	k.mu.Unlock()
	for _, a := range p {
		a.done(err)
	}
}

// outcomes records Done calls of named batches, in order.
type outcomes struct {
	mu   sync.Mutex
	got  []string
	errs map[string]error
	n    chan struct{}
}

func newOutcomes() *outcomes {
	return &outcomes{errs: map[string]error{}, n: make(chan struct{}, 1000)}
}

// done is the Done of batch name: it logs "name" or "name!" for an error.
func (o *outcomes) done(name string) func(error) {
	return func(err error) {
		o.mu.Lock()
		s := name
		if err != nil {
			s += "!"
			o.errs[name] = err
		}
		o.got = append(o.got, s)
		o.mu.Unlock()
		o.n <- struct{}{}
	}
}

func (o *outcomes) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// wait waits until n Done calls in all were made.
func (o *outcomes) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(wait)
	for len(o.list()) < n {
		select {
		case <-o.n:
		case <-deadline:
			t.Fatalf("waited %s for %d Done calls; got %v", wait, n, o.list())
		}
	}
}

func ev(id, aggType string) Event {
	return Event{ID: id, AggregateType: aggType, AggregateID: "agg-" + id, Payload: []byte(`{"n":"` + id + `"}`)}
}

// batch is a batch of events with ids ids of aggregate type "order".
func batch(done func(error), ids ...string) Batch {
	b := Batch{Done: done}
	for _, id := range ids {
		b.Events = append(b.Events, ev(id, "order"))
	}
	return b
}

// offer sends bs on out, and reports whether ctx ended first.
func offer(ctx context.Context, out chan<- Batch, bs ...Batch) bool {
	for _, b := range bs {
		select {
		case out <- b:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// script is a source whose n-th Run offers runs[n] (the last one again
// past the end) and then waits for its end; runs counts the calls.
func script(runs *int, mu *sync.Mutex, batches ...func() []Batch) fakeSource {
	return fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
		mu.Lock()
		n := *runs
		*runs++
		mu.Unlock()
		if n >= len(batches) {
			n = len(batches) - 1
		}
		offer(ctx, out, batches[n]()...)
		<-ctx.Done()
		return nil
	}}
}

// logs collects what a runner logged, as text.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// atOnce is a runner config whose restarts come at once.
func atOnce(cfg RunnerConfig) RunnerConfig {
	cfg.RetryMin, cfg.RetryMax = time.Millisecond, time.Millisecond
	return cfg
}

// running is a runner started in the background.
type running struct {
	cancel context.CancelFunc
	ended  chan error
}

func start(t *testing.T, src Source, snk Sink, cfg RunnerConfig, opts ...Option) *running {
	t.Helper()
	r, err := NewRunner(src, snk, atOnce(cfg), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{cancel: cancel, ended: make(chan error, 1)}
	go func() { run.ended <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-run.ended:
		case <-time.After(wait):
			t.Errorf("the runner did not return within %s of its cancellation", wait)
		}
	})
	return run
}

// stop cancels the runner and returns what Run returned.
func (run *running) stop(t *testing.T) error {
	t.Helper()
	run.cancel()
	return run.result(t)
}

// result waits for Run to return by itself.
func (run *running) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-run.ended:
		run.ended <- err // for the cleanup
		return err
	case <-time.After(wait):
		t.Fatalf("the runner did not return within %s", wait)
		return nil
	}
}

// on lists the ids of the messages of k on topic, in publish order.
func on(msgs []Message, topic string) []string {
	var ids []string
	for _, m := range msgs {
		if m.Topic == topic {
			ids = append(ids, m.EventID)
		}
	}
	return ids
}

func (k *broker) publishedOn(topic string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return on(k.published, topic)
}

func (k *broker) find(topic, id string) (Message, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range k.published {
		if m.Topic == topic && m.EventID == id {
			return m, true
		}
	}
	return Message{}, false
}

// TestRunnerDoneInOrder: Done is called once per batch, in the order the
// batches came, and only once Kafka has acknowledged every event of the
// batch and of every batch before it, however the acknowledgements are
// ordered. A failure fails that batch and every later one.
func TestRunnerDoneInOrder(t *testing.T) {
	// a: e1 e2 | b: e3 | c: e4, the middle of a source transaction (no
	// Done) | d: nothing to publish, only a position to confirm | e: e5.
	tests := []struct {
		name string
		acks []string
		// fail, when set, is the event whose acknowledgement is an error.
		fail string
		// steps is what Done has said after each acknowledgement.
		steps [][]string
		// final is what Done has said once the runner stopped.
		final []string
	}{
		{
			name:  "acknowledged in order",
			acks:  []string{"e1", "e2", "e3", "e4", "e5"},
			steps: [][]string{{}, {"a"}, {"a", "b"}, {"a", "b", "d"}, {"a", "b", "d", "e"}},
			final: []string{"a", "b", "d", "e"},
		},
		{
			name:  "acknowledged last first",
			acks:  []string{"e5", "e4", "e3", "e2", "e1"},
			steps: [][]string{{}, {}, {}, {}, {"a", "b", "d", "e"}},
			final: []string{"a", "b", "d", "e"},
		},
		{
			name:  "partitions interleaved",
			acks:  []string{"e1", "e3", "e5", "e2", "e4"},
			steps: [][]string{{}, {}, {}, {"a", "b"}, {"a", "b", "d", "e"}},
			final: []string{"a", "b", "d", "e"},
		},
		{
			name:  "a failure fails every later batch",
			acks:  []string{"e1", "e3", "e2"},
			fail:  "e2",
			steps: [][]string{{}, {}, {"a!", "b!"}},
			// d and e fail when the runner aborts what is left.
			final: []string{"a!", "b!", "d!", "e!"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			k.hold = true
			k.outcome = func(m *Message, _ int) error {
				if m.EventID == tc.fail {
					return errors.New("broker unavailable")
				}
				return nil
			}
			o := newOutcomes()
			var mu sync.Mutex
			runs := 0
			src := script(&runs, &mu, func() []Batch {
				return []Batch{
					batch(o.done("a"), "e1", "e2"),
					batch(o.done("b"), "e3"),
					batch(nil, "e4"),
					{Done: o.done("d")},
					batch(o.done("e"), "e5"),
				}
			}, func() []Batch { return nil })
			run := start(t, src, k.sink(), RunnerConfig{})
			// The runner takes batches in turn: e5 published, d was taken.
			k.until(t, "five events published", func() bool { return len(k.published) == 5 })
			for i, id := range tc.acks {
				k.ack(func(m Message) bool { return m.EventID == id })
				if got := o.list(); !slices.Equal(got, tc.steps[i]) && (len(got) > 0 || len(tc.steps[i]) > 0) {
					t.Fatalf("after acknowledging %v, Done said %v; want %v", tc.acks[:i+1], got, tc.steps[i])
				}
			}
			o.wait(t, len(tc.final))
			if err := run.stop(t); err != nil {
				t.Fatalf("Run after a stop: %v; want nil", err)
			}
			if got := o.list(); !slices.Equal(got, tc.final) {
				t.Fatalf("Done said %v; want %v, once per batch", got, tc.final)
			}
		})
	}
}

// TestRunnerGracefulStop: a stop waits up to ShutdownTimeout for Kafka to
// acknowledge what is in flight and confirms it before it stops the
// source; one that cannot drain in time says so and leaves the batch not
// done, to be published again; a stop in the middle of a source
// transaction first takes the rest of it.
func TestRunnerGracefulStop(t *testing.T) {
	tests := []struct {
		name string
		// flush replaces the sink's Flush, when set.
		flush func(k *broker) func(context.Context) error
		// midTxn: the first batch is a chunk of a source transaction,
		// whose end (batch b) the source sends only after the stop.
		midTxn bool
		// want is the Done log at the end; wantErr what runOnce returns;
		// wantLog a line the runner logged.
		want    []string
		wantErr string
		wantLog string
	}{
		{
			name: "drains what is in flight",
			want: []string{"a"},
		},
		{
			name: "cannot drain within the timeout",
			flush: func(k *broker) func(context.Context) error {
				return func(ctx context.Context) error {
					<-ctx.Done() // Kafka never answers
					return ctx.Err()
				}
			},
			want:    []string{"a!"},
			wantErr: "drain in-flight events within 50ms",
			wantLog: "shutdown timeout passed with events in flight",
		},
		{
			name:   "takes the rest of a source transaction",
			midTxn: true,
			want:   []string{"b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			k.hold = true
			snk := k.sink()
			if tc.flush != nil {
				snk.flush = tc.flush(k)
			}
			o := newOutcomes()
			rest := make(chan struct{})
			srcEnded := make(chan []string, 1)
			src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
				if tc.midTxn {
					if offer(ctx, out, batch(nil, "e1")) {
						<-rest
						offer(ctx, out, batch(o.done("b"), "e2"))
					}
				} else {
					offer(ctx, out, batch(o.done("a"), "e1"))
				}
				<-ctx.Done()
				srcEnded <- o.list() // what was confirmed before the source stopped
				return nil
			}}
			var l logs
			r, err := NewRunner(src, snk, atOnce(RunnerConfig{ShutdownTimeout: 50 * time.Millisecond}), WithLogger(l.logger()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			go func() { _, err := r.runOnce(ctx); ended <- err }()
			k.until(t, "e1 published", func() bool { return len(k.published) == 1 })
			cancel()
			close(rest)
			var got error
			select {
			case got = <-ended:
			case <-time.After(wait):
				t.Fatalf("runOnce did not return within %s of the stop", wait)
			}
			if tc.wantErr == "" && got != nil || tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)) {
				t.Fatalf("runOnce: %v; want %q", got, tc.wantErr)
			}
			if done := o.list(); !slices.Equal(done, tc.want) {
				t.Fatalf("Done said %v; want %v", done, tc.want)
			}
			if before := <-srcEnded; !slices.Equal(before, tc.want) {
				t.Errorf("when the source stopped, Done had said %v; want %v: the source reports the last checkpoint as it stops", before, tc.want)
			}
			if tc.wantLog != "" && !strings.Contains(l.String(), tc.wantLog) {
				t.Errorf("log %q; want %q", l.String(), tc.wantLog)
			}
		})
	}
}

// TestRunnerSourceErrors: a source that loses its connection, or stops
// unasked, is run again after a backoff; a permanent error ends Run.
func TestRunnerSourceErrors(t *testing.T) {
	errMissing := errors.New(`relation "outbox" does not exist`)
	tests := []struct {
		name string
		// first is what the first Run of the source returns.
		first    error
		wantRuns int
		wantErr  error // nil: Run goes on, and a stop returns nil
	}{
		{name: "lost connection restarts", first: errors.New("connection reset by peer"), wantRuns: 2},
		{name: "stopped unasked restarts", first: nil, wantRuns: 2},
		{name: "permanent returns", first: Permanent(errMissing), wantRuns: 1, wantErr: errMissing},
		{name: "an event error returns", first: &EventError{EventID: "e9", Err: errMissing}, wantRuns: 1, wantErr: errMissing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			o := newOutcomes()
			var mu sync.Mutex
			runs := 0
			src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
				mu.Lock()
				runs++
				n := runs
				mu.Unlock()
				if n == 1 {
					return tc.first
				}
				offer(ctx, out, batch(o.done("a"), "e1"))
				<-ctx.Done()
				return nil
			}}
			run := start(t, src, k.sink(), RunnerConfig{})
			var err error
			if tc.wantErr != nil {
				err = run.result(t)
			} else {
				o.wait(t, 1)
				err = run.stop(t)
			}
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Run: %v; want %v", err, tc.wantErr)
			}
			mu.Lock()
			defer mu.Unlock()
			if runs != tc.wantRuns {
				t.Fatalf("the source ran %d times; want %d", runs, tc.wantRuns)
			}
		})
	}
}

// TestRunnerPermanentErrorDuringStop: a stop asked for while the run ends
// on an error no new run can get past (the relay stopped just after it
// found its slot lost) still returns that error, so that the process does
// not exit as if it had relayed.
func TestRunnerPermanentErrorDuringStop(t *testing.T) {
	errLost := errors.New("replication slot is gone")
	src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
		return Permanent(errLost)
	}}
	snk := newBroker().sink()
	cancelled := make(chan func(), 1)
	abort := snk.abort
	// The runner aborts the sink once the source has ended, before it
	// decides what the run's error means: the stop comes in between.
	var once sync.Once
	snk.abort = func(ctx context.Context) error {
		once.Do(func() { (<-cancelled)() })
		return abort(ctx)
	}
	run := start(t, src, snk, RunnerConfig{})
	cancelled <- run.cancel
	if err := run.result(t); !errors.Is(err, errLost) {
		t.Fatalf("Run: %v; want %v", err, errLost)
	}
}

// TestRunnerPermanentErrorAsSourceStops: a stop asked for with nothing
// amiss, and the source, as it stops, finds an error no new run can get
// past (its slot lost, say): Run returns that error, as the relay did not
// stop cleanly.
func TestRunnerPermanentErrorAsSourceStops(t *testing.T) {
	errLost := errors.New("replication slot is gone")
	src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
		<-ctx.Done()
		return Permanent(errLost)
	}}
	run := start(t, src, newBroker().sink(), RunnerConfig{})
	run.cancel()
	if err := run.result(t); !errors.Is(err, errLost) {
		t.Fatalf("Run: %v; want %v", err, errLost)
	}
}

const ownTopic = "outbox.event.order"

// TestRunnerEventErrors: an event that can never be published goes, with
// a dead letter topic, to that topic with headers saying which event and
// why, and the events around it flow; without one, Run stops with an
// error naming the event, and its batch is not done.
func TestRunnerEventErrors(t *testing.T) {
	tests := []struct {
		name string
		bad  Event
		// limit is the sink's size limit of the event's own topic.
		limit int
		// wantErr is in the dead letter's error header, and in Run's error
		// without a dead letter topic.
		wantErr string
		// wantTopic is the header naming the topic it was routed to; ""
		// when routing did not get that far.
		wantTopic string
		// wantValue: the dead letter record keeps the payload.
		wantValue bool
	}{
		{
			name: "invalid row",
			bad: Event{ID: "bad", AggregateType: "order", Payload: []byte(`{}`),
				Invalid: &EventError{EventID: "bad", Err: errors.New(`column "aggregateid" is missing or NULL`)}},
			wantErr:   `column "aggregateid" is missing or NULL`,
			wantValue: true,
		},
		{
			name:      "illegal topic",
			bad:       Event{ID: "bad", AggregateType: "order lines", AggregateID: "o1", Payload: []byte(`{}`)},
			wantErr:   `aggregate type "order lines"`,
			wantValue: true,
		},
		{
			name:      "too large for its topic",
			bad:       Event{ID: "bad", AggregateType: "order", AggregateID: "o1", Payload: bytes.Repeat([]byte("x"), 1000)},
			limit:     500,
			wantErr:   "more than the broker's limit of 500",
			wantTopic: ownTopic,
		},
	}
	for _, tc := range tests {
		for _, dlq := range []string{"dlq", ""} {
			name := tc.name + "/dead letter topic"
			if dlq == "" {
				name = tc.name + "/no dead letter topic"
			}
			t.Run(name, func(t *testing.T) {
				k := newBroker()
				if tc.limit > 0 {
					k.limit = map[string]int{ownTopic: tc.limit}
				}
				o := newOutcomes()
				var mu sync.Mutex
				runs := 0
				src := script(&runs, &mu, func() []Batch {
					b := batch(o.done("a"), "ok1")
					b.Events = append(b.Events, tc.bad, ev("ok2", "order"))
					return []Batch{b}
				})
				run := start(t, src, k.sink(), RunnerConfig{DeadLetterTopic: dlq})
				if dlq == "" {
					err := run.result(t)
					var ee *EventError
					if !errors.As(err, &ee) || ee.EventID != "bad" || !strings.Contains(err.Error(), tc.wantErr) || !IsPermanent(err) {
						t.Fatalf("Run: %v; want a permanent error naming event bad and saying %q", err, tc.wantErr)
					}
					o.wait(t, 1)
					if got := o.list(); !slices.Equal(got, []string{"a!"}) {
						t.Fatalf("Done said %v; want [a!]: the batch of an event neither published nor dead lettered is not done", got)
					}
					if got := k.publishedOn(ownTopic); slices.Contains(got, "bad") || slices.Contains(got, "ok2") {
						t.Fatalf("published %v; want nothing from event bad on", got)
					}
					return
				}
				o.wait(t, 1)
				if err := run.stop(t); err != nil {
					t.Fatalf("Run: %v", err)
				}
				if got := o.list(); !slices.Equal(got, []string{"a"}) {
					t.Fatalf("Done said %v; want [a]", got)
				}
				if got := k.publishedOn(ownTopic); !slices.Equal(got, []string{"ok1", "ok2"}) {
					t.Fatalf("%s got %v; want [ok1 ok2]", ownTopic, got)
				}
				dl, ok := k.find("dlq", "bad")
				if !ok {
					t.Fatalf("nothing on the dead letter topic; calls %v", k.callLog())
				}
				if id := header(&dl, "id"); id != "bad" {
					t.Errorf("dead letter id header %q; want bad", id)
				}
				if e := header(&dl, HeaderError); !strings.Contains(e, tc.wantErr) {
					t.Errorf("dead letter %s header %q; want it to say %q", HeaderError, e, tc.wantErr)
				}
				if topic, ok := headerOK(&dl, HeaderOriginalTopic); topic != tc.wantTopic || ok != (tc.wantTopic != "") {
					t.Errorf("dead letter %s header %q (present %v); want %q", HeaderOriginalTopic, topic, ok, tc.wantTopic)
				}
				if got := dl.Value != nil; got != tc.wantValue {
					t.Errorf("dead letter value kept %v; want %v", got, tc.wantValue)
				}
				if !tc.wantValue && header(&dl, HeaderOmittedValue) != strconv.Itoa(len(tc.bad.Payload)) {
					t.Errorf("dead letter %s %q; want %d", HeaderOmittedValue, header(&dl, HeaderOmittedValue), len(tc.bad.Payload))
				}
				if string(dl.Key) != tc.bad.AggregateID {
					t.Errorf("dead letter key %q; want the aggregate id %q", dl.Key, tc.bad.AggregateID)
				}
			})
		}
	}
}

func headerOK(m *Message, key string) (string, bool) {
	return header(m, key), hasHeader(m, key)
}

// TestRunnerSuspect: the broker answers for a whole batch, so an event
// that failed after it was handed to the sink is only a suspect, with a
// dead letter topic or without. The next run publishes it alone,
// everything before it flushed first; it goes to the dead letter topic,
// or stops the relay naming it, only if it fails alone.
func TestRunnerSuspect(t *testing.T) {
	tooLarge := func(m *Message) error {
		return &EventError{EventID: m.EventID, Err: &RecordTooLargeError{Size: m.Size(), Cause: errors.New("MESSAGE_TOO_LARGE")}}
	}
	tests := []struct {
		name string
		dlq  string
		// fails: x fails when published for the n-th time (0 first).
		fails func(n int) bool
		// wantDead: x ends on the dead letter topic; else on its own.
		wantDead bool
		wantDone []string
	}{
		{name: "a neighbour's failure", dlq: "dlq", fails: func(n int) bool { return n == 0 }, wantDone: []string{"a!", "a"}},
		{name: "its own failure", dlq: "dlq", fails: func(int) bool { return true }, wantDead: true, wantDone: []string{"a!", "a"}},
		{name: "no dead letter topic, a neighbour's failure", fails: func(n int) bool { return n == 0 }, wantDone: []string{"a!", "a"}},
		{name: "no dead letter topic, its own failure", fails: func(int) bool { return true }, wantDone: []string{"a!", "a!"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			k.outcome = func(m *Message, n int) error {
				if m.Topic == ownTopic && m.EventID == "x" && tc.fails(n) {
					return tooLarge(m)
				}
				return nil
			}
			o := newOutcomes()
			var mu sync.Mutex
			runs := 0
			src := script(&runs, &mu, func() []Batch { return []Batch{batch(o.done("a"), "y", "x", "z")} })
			run := start(t, src, k.sink(), RunnerConfig{DeadLetterTopic: tc.dlq})
			o.wait(t, len(tc.wantDone))
			stops := tc.dlq == "" && tc.fails(1)
			var err error
			if stops {
				err = run.result(t)
				var ee *EventError
				if !errors.As(err, &ee) || ee.EventID != "x" || !IsPermanent(err) {
					t.Fatalf("Run: %v; want a permanent error naming event x", err)
				}
			} else if err = run.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := o.list(); !slices.Equal(got, tc.wantDone) {
				t.Fatalf("Done said %v; want %v", got, tc.wantDone)
			}
			// The second run: y, then x alone between two flushes, then z,
			// unless x stops the relay.
			calls := k.callLog()
			second := slices.Index(calls, "publish "+ownTopic+"/y")
			second += 1 + slices.Index(calls[second+1:], "publish "+ownTopic+"/y")
			want := []string{"publish " + ownTopic + "/y", "flush", "publish " + ownTopic + "/x", "flush"}
			if tc.wantDead {
				want = append(want, "publish dlq/x")
			}
			if !stops {
				want = append(want, "publish "+ownTopic+"/z")
			}
			if got := calls[second:min(len(calls), second+len(want))]; !slices.Equal(got, want) {
				t.Fatalf("second run's calls %v; want %v (all calls %v)", got, want, calls)
			}
			_, dead := k.find("dlq", "x")
			if dead != tc.wantDead {
				t.Fatalf("x on the dead letter topic: %v; want %v", dead, tc.wantDead)
			}
			if dead {
				dl, _ := k.find("dlq", "x")
				if v := header(&dl, HeaderOmittedValue); dl.Value != nil || v == "" {
					t.Errorf("dead letter of a record too large: value %q, %s %q; want no value and its size", dl.Value, HeaderOmittedValue, v)
				}
			}
		})
	}
}

// TestRunnerDeadLetterTooLarge: a dead letter record larger than its
// topic takes, refused by the sink's size check, is sent again without
// what does not fit (value, a large key, the excess of long headers),
// each omission marked with the size of what was there; one refused by
// the broker itself is sent at its smallest by the next run. One that
// cannot fit stops the relay naming the event.
func TestRunnerDeadLetterTooLarge(t *testing.T) {
	longErr := strings.Repeat("é", 2500) // 5000 bytes
	tests := []struct {
		name string
		bad  Event
		// limits are the sink's size limits by topic.
		limits map[string]int
		// brokerRefuses: the broker refuses bad's dead letter record when
		// published for the n-th time (the sink's check let it through).
		brokerRefuses func(n int) bool
		// wantMarkers are the omitted-markers of the dead letter record;
		// nil with wantErr, when the relay stops.
		wantMarkers map[string]string
		wantKey     bool
		wantDone    []string
		wantErr     string
	}{
		{
			name:        "value left out",
			bad:         Event{ID: "bad", AggregateType: "order", AggregateID: "o1", Payload: bytes.Repeat([]byte("v"), 1000)},
			limits:      map[string]int{ownTopic: 500, "dlq": 500},
			wantMarkers: map[string]string{HeaderOmittedValue: "1000"},
			wantKey:     true,
			wantDone:    []string{"a"},
		},
		{
			name:        "large key left out",
			bad:         Event{ID: "bad", AggregateType: "order", AggregateID: strings.Repeat("k", 3000), Payload: []byte(`{}`)},
			limits:      map[string]int{ownTopic: 2000, "dlq": 2000},
			wantMarkers: map[string]string{HeaderOmittedValue: "2", HeaderOmittedKey: "3000"},
			wantDone:    []string{"a"},
		},
		{
			name: "long error cut",
			bad: Event{ID: "bad", AggregateType: "order", AggregateID: "o1", Payload: []byte(`{"a":1}`),
				Invalid: &EventError{EventID: "bad", Err: errors.New(longErr)}},
			limits:      map[string]int{"dlq": 1500},
			wantMarkers: map[string]string{HeaderOmittedValue: "7", HeaderOmittedError: "5000"},
			wantKey:     true,
			wantDone:    []string{"a"},
		},
		{
			name:     "cannot fit",
			bad:      Event{ID: "bad", AggregateType: "order", AggregateID: "o1", Payload: bytes.Repeat([]byte("v"), 1000)},
			limits:   map[string]int{ownTopic: 500, "dlq": 70},
			wantDone: []string{"a!"},
			wantErr:  "its dead letter record cannot be written either",
		},
		{
			name:          "refused by the broker, smallest next run",
			bad:           Event{ID: "bad", AggregateType: "order", AggregateID: strings.Repeat("k", 3000), Payload: []byte(`{}`)},
			limits:        map[string]int{ownTopic: 2000},
			brokerRefuses: func(n int) bool { return n == 0 },
			wantMarkers:   map[string]string{HeaderOmittedValue: "2", HeaderOmittedKey: "3000"},
			wantDone:      []string{"a!", "a"},
		},
		{
			name:          "refused by the broker at its smallest too",
			bad:           Event{ID: "bad", AggregateType: "order", AggregateID: strings.Repeat("k", 3000), Payload: []byte(`{}`)},
			limits:        map[string]int{ownTopic: 2000},
			brokerRefuses: func(int) bool { return true },
			wantDone:      []string{"a!", "a!"},
			wantErr:       "its dead letter record cannot be written either",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			k.limit = tc.limits
			k.outcome = func(m *Message, n int) error {
				if m.Topic == "dlq" && tc.brokerRefuses != nil && tc.brokerRefuses(n) {
					return &EventError{EventID: m.EventID, Err: &RecordTooLargeError{Size: m.Size(), Cause: errors.New("MESSAGE_TOO_LARGE")}}
				}
				return nil
			}
			o := newOutcomes()
			var mu sync.Mutex
			runs := 0
			src := script(&runs, &mu, func() []Batch {
				b := batch(o.done("a"), "ok1")
				b.Events = append(b.Events, tc.bad, ev("ok2", "order"))
				return []Batch{b}
			})
			run := start(t, src, k.sink(), RunnerConfig{DeadLetterTopic: "dlq"})
			o.wait(t, len(tc.wantDone))
			if tc.wantErr != "" {
				err := run.result(t)
				var ee *EventError
				if !errors.As(err, &ee) || ee.EventID != "bad" || !IsPermanent(err) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run: %v; want a permanent error naming event bad and saying %q", err, tc.wantErr)
				}
				if got := o.list(); !slices.Equal(got, tc.wantDone) {
					t.Fatalf("Done said %v; want %v", got, tc.wantDone)
				}
				return
			}
			if err := run.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := o.list(); !slices.Equal(got, tc.wantDone) {
				t.Fatalf("Done said %v; want %v", got, tc.wantDone)
			}
			// The last dead letter record published is the one that stays.
			k.mu.Lock()
			var dl Message
			for _, m := range k.published {
				if m.Topic == "dlq" {
					dl = m
				}
			}
			k.mu.Unlock()
			if dl.EventID != "bad" {
				t.Fatalf("no dead letter record of event bad; calls %v", k.callLog())
			}
			if lim, ok := tc.limits["dlq"]; ok && dl.Size() > lim {
				t.Errorf("dead letter record of %d bytes; the topic takes %d", dl.Size(), lim)
			}
			markers := map[string]string{}
			for _, h := range dl.Headers {
				if strings.HasPrefix(h.Key, "outboxrelay.omitted.") {
					markers[h.Key] = string(h.Value)
				}
			}
			if fmt.Sprint(markers) != fmt.Sprint(tc.wantMarkers) {
				t.Errorf("markers %v; want %v", markers, tc.wantMarkers)
			}
			if dl.Value != nil {
				t.Errorf("dead letter value %q; want it left out", dl.Value)
			}
			if got := dl.Key != nil; got != tc.wantKey {
				t.Errorf("dead letter key kept: %v; want %v", got, tc.wantKey)
			}
			if header(&dl, "id") != "bad" {
				t.Errorf("dead letter id header %q; want bad: it must always say which event", header(&dl, "id"))
			}
			if e := header(&dl, HeaderError); !utf8.ValidString(e) || len(e) > DeadLetterHeaderBytes && tc.wantMarkers[HeaderOmittedError] != "" {
				t.Errorf("error header of %d bytes, valid UTF-8 %v; want at most %d, cut on a character", len(e), utf8.ValidString(e), DeadLetterHeaderBytes)
			}
			if got := k.publishedOn(ownTopic); !slices.Equal(got[len(got)-2:], []string{"ok1", "ok2"}) {
				t.Errorf("%s got %v; want ok1 and ok2 to flow", ownTopic, got)
			}
		})
	}
}

// TestRunnerTransactions: with a transactional sink, the runner commits at
// a batch that carries a checkpoint once the transaction interval has
// passed, with that checkpoint; a batch's Done comes only with the commit;
// a source's Prepare runs after the flush and before the commit, and its
// failure, or a refused event, aborts the transaction. An event refused in
// a transaction is tried alone, and dead lettered if it fails alone.
func TestRunnerTransactions(t *testing.T) {
	checkpoint := func(name string) func() (*Message, error) {
		return func() (*Message, error) { return &Message{Topic: "checkpoints", Value: []byte(name)}, nil }
	}
	refused := func(m *Message) error {
		return &EventError{EventID: m.EventID, Err: errors.New("the broker refused the record: INVALID_RECORD")}
	}
	logged := func(k *broker, call string) {
		k.mu.Lock()
		k.call(call)
		k.mu.Unlock()
	}
	tests := []struct {
		name     string
		interval time.Duration
		dlq      string
		// batches are what each run of the source offers; k is there for
		// Prepare to log its call.
		batches func(k *broker, o *outcomes) []Batch
		outcome func(m *Message, n int) error
		commit  func(k *broker) func(context.Context, *Message) error
		// waitDone is the number of Done calls to wait for before the
		// stop, 0 to wait for two events published instead.
		waitDone int
		wantDone []string // the first Done calls
		// wantCalls are the calls of run callsOfRun, in order.
		callsOfRun int
		wantCalls  []string
		// wantCommitted is what read_committed consumers see.
		wantCommitted []string
	}{
		{
			name:       "commits at the first checkpoint after the interval",
			callsOfRun: 1,
			interval:   time.Nanosecond,
			batches: func(k *broker, o *outcomes) []Batch {
				b := batch(o.done("b"), "e2")
				b.Checkpoint = checkpoint("cp-b")
				return []Batch{batch(o.done("a"), "e1"), b}
			},
			waitDone:      2,
			wantDone:      []string{"a", "b"},
			wantCalls:     []string{"publish " + ownTopic + "/e1", "publish " + ownTopic + "/e2", "commit cp-b"},
			wantCommitted: []string{"e1", "e2"},
		},
		{
			name:       "a stop commits the last checkpoint",
			callsOfRun: 1,
			interval:   time.Hour,
			batches: func(k *broker, o *outcomes) []Batch {
				a, b := batch(o.done("a"), "e1"), batch(o.done("b"), "e2")
				a.Checkpoint, b.Checkpoint = checkpoint("cp-a"), checkpoint("cp-b")
				return []Batch{a, b}
			},
			wantDone:      []string{"a", "b"},
			wantCalls:     []string{"publish " + ownTopic + "/e1", "publish " + ownTopic + "/e2", "commit cp-b"},
			wantCommitted: []string{"e1", "e2"},
		},
		{
			name:       "prepare after the flush, before the commit",
			callsOfRun: 1,
			interval:   time.Hour,
			batches: func(k *broker, o *outcomes) []Batch {
				b := batch(o.done("a"), "e1", "e2")
				b.Prepare = func(context.Context) error { logged(k, "prepare"); return nil }
				return []Batch{b}
			},
			waitDone:      1,
			wantDone:      []string{"a"},
			wantCalls:     []string{"publish " + ownTopic + "/e1", "publish " + ownTopic + "/e2", "flush", "prepare", "commit <nil>"},
			wantCommitted: []string{"e1", "e2"},
		},
		{
			name:       "a failed prepare aborts",
			callsOfRun: 1,
			interval:   time.Hour,
			batches: func(k *broker, o *outcomes) []Batch {
				b := batch(o.done("a"), "e1")
				b.Prepare = func(context.Context) error {
					logged(k, "prepare")
					return errors.New("the claim's rows were taken by another instance")
				}
				return []Batch{b}
			},
			waitDone:  2,
			wantDone:  []string{"a!", "a!"}, // the next run fails the same way
			wantCalls: []string{"publish " + ownTopic + "/e1", "flush", "prepare", "abort"},
		},
		{
			name:       "a failed commit aborts",
			callsOfRun: 1,
			interval:   time.Nanosecond,
			batches: func(k *broker, o *outcomes) []Batch {
				b := batch(o.done("a"), "e1")
				b.Checkpoint = checkpoint("cp-a")
				return []Batch{b}
			},
			commit: func(k *broker) func(context.Context, *Message) error {
				return func(context.Context, *Message) error {
					logged(k, "commit fails")
					return errors.New("coordinator not available")
				}
			},
			waitDone:  2,
			wantDone:  []string{"a!", "a!"},
			wantCalls: []string{"publish " + ownTopic + "/e1", "commit fails", "abort"},
		},
		{
			name:       "a neighbour's refusal: the suspect alone commits",
			callsOfRun: 2,
			interval:   time.Nanosecond,
			dlq:        "dlq",
			batches: func(k *broker, o *outcomes) []Batch {
				b := batch(o.done("a"), "y", "x")
				b.Checkpoint = checkpoint("cp-a")
				return []Batch{b}
			},
			outcome: func(m *Message, n int) error {
				if m.EventID == "x" && n == 0 {
					return refused(m)
				}
				return nil
			},
			waitDone:      2,
			wantDone:      []string{"a!", "a"},
			wantCalls:     []string{"publish " + ownTopic + "/y", "flush", "publish " + ownTopic + "/x", "flush", "commit cp-a"},
			wantCommitted: []string{"y", "x"},
		},
		{
			name:       "its own refusal: dead lettered in the next transaction",
			callsOfRun: 3,
			interval:   time.Nanosecond,
			dlq:        "dlq",
			batches: func(k *broker, o *outcomes) []Batch {
				b := batch(o.done("a"), "y", "x")
				b.Checkpoint = checkpoint("cp-a")
				return []Batch{b}
			},
			outcome: func(m *Message, n int) error {
				if m.Topic == ownTopic && m.EventID == "x" {
					return refused(m)
				}
				return nil
			},
			// Refused among others, then alone (the transaction can only
			// abort), then dead lettered.
			waitDone:      3,
			wantDone:      []string{"a!", "a!", "a"},
			wantCalls:     []string{"publish " + ownTopic + "/y", "publish dlq/x", "commit cp-a"},
			wantCommitted: []string{"y", "dlq:x"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			k.outcome = tc.outcome
			snk := k.txnSink()
			if tc.commit != nil {
				snk.commit = tc.commit(k)
			}
			o := newOutcomes()
			src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
				logged(k, "run")
				bs := tc.batches(k, o)
				for i := range bs {
					// A batch's Done(nil) must come with the commit.
					done := bs[i].Done
					bs[i].Done = func(err error) {
						k.mu.Lock()
						committed := len(k.committed)
						k.mu.Unlock()
						if err == nil && committed == 0 {
							t.Errorf("Done(nil) before any commit")
						}
						done(err)
					}
				}
				offer(ctx, out, bs...)
				<-ctx.Done()
				return nil
			}}
			run := start(t, src, snk, RunnerConfig{DeadLetterTopic: tc.dlq, TransactionInterval: tc.interval})
			if tc.waitDone > 0 {
				o.wait(t, tc.waitDone)
			} else {
				k.until(t, "two events published", func() bool { return len(k.published) == 2 })
			}
			if err := run.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := o.list(); len(got) < len(tc.wantDone) || !slices.Equal(got[:len(tc.wantDone)], tc.wantDone) {
				t.Fatalf("Done said %v; want %v first", got, tc.wantDone)
			}
			if got := runCalls(k.callLog(), tc.callsOfRun); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("calls of run %d: %v; want %v (all: %v)", tc.callsOfRun, got, tc.wantCalls, k.callLog())
			}
			k.mu.Lock()
			var committed []string
			for _, m := range k.committed {
				if m.Topic == ownTopic {
					committed = append(committed, m.EventID)
				} else {
					committed = append(committed, m.Topic+":"+m.EventID)
				}
			}
			k.mu.Unlock()
			if !slices.Equal(committed, tc.wantCommitted) {
				t.Errorf("committed %v; want %v", committed, tc.wantCommitted)
			}
		})
	}
}

// runCalls are the calls made during the n-th run of the source (from 1).
func runCalls(calls []string, n int) []string {
	var runs []int
	for i, c := range calls {
		if c == "run" {
			runs = append(runs, i)
		}
	}
	if n > len(runs) {
		return nil
	}
	end := len(calls)
	if n < len(runs) {
		end = runs[n]
	}
	return calls[runs[n-1]+1 : end]
}

// TestRunnerNullKeys: a row whose aggregate id column is NULL is invalid,
// unless the runner passes NULL keys to its router (WithNullKeys, as the
// Debezium router asks), which then makes the record; an event invalid
// for another reason stays invalid either way.
func TestRunnerNullKeys(t *testing.T) {
	m := ColumnMap{}.WithDefaults()
	nullKey := m.NewEvent([]Column{{Name: "id", Value: []byte("nk")}, {Name: "aggregatetype", Value: []byte("order")},
		{Name: "aggregateid", Null: true}, {Name: "payload", Value: []byte(`{}`)}}, time.Now(), "here")
	nullID := m.NewEvent([]Column{{Name: "id", Null: true}, {Name: "aggregatetype", Value: []byte("order")},
		{Name: "aggregateid", Null: true}}, time.Now(), "here")
	if !nullKey.AggregateIDNull || nullKey.Invalid == nil || nullID.Invalid == nil {
		t.Fatalf("NewEvent: null key %+v, null id %+v", nullKey, nullID)
	}
	// A router that writes a null key for a NULL aggregate id, as the
	// Debezium router does.
	router := routerFunc(func(ctx context.Context, e *Event) (Message, error) {
		msg, err := NewRouting(Routing{}).Route(ctx, e)
		if v, null, _ := e.Field(m, m.AggregateID); null {
			msg.Key = v
		}
		return msg, err
	})
	for _, tc := range []struct {
		name    string
		opts    []Option
		bad     Event
		wantErr string
	}{
		{name: "routed", opts: []Option{WithRouter(router), WithNullKeys()}, bad: nullKey},
		{name: "without WithNullKeys", opts: []Option{WithRouter(router)}, bad: nullKey, wantErr: `column "aggregateid" is missing or NULL`},
		{name: "a NULL id too", opts: []Option{WithRouter(router), WithNullKeys()}, bad: nullID, wantErr: `column "id" is missing or NULL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			o := newOutcomes()
			var mu sync.Mutex
			runs := 0
			src := script(&runs, &mu, func() []Batch {
				b := batch(o.done("a"), "ok1")
				b.Events = append(b.Events, tc.bad, ev("ok2", "order"))
				return []Batch{b}
			})
			run := start(t, src, k.sink(), RunnerConfig{}, tc.opts...)
			if tc.wantErr != "" {
				if err := run.result(t); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run: %v; want an error saying %q", err, tc.wantErr)
				}
				return
			}
			o.wait(t, 1)
			if err := run.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := k.publishedOn(ownTopic); !slices.Equal(got, []string{"ok1", "nk", "ok2"}) {
				t.Fatalf("published %v; want [ok1 nk ok2]", got)
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, msg := range k.published {
				if msg.EventID == "nk" && msg.Key != nil {
					t.Errorf("key %q; want null", msg.Key)
				}
			}
		})
	}
}

type routerFunc func(ctx context.Context, e *Event) (Message, error)

func (f routerFunc) Route(ctx context.Context, e *Event) (Message, error) { return f(ctx, e) }

// TestRunnerFiltered: a message the router marks Filtered (a Kafka Connect
// Filter dropped the record) is not sent, and its batch is done as soon as
// the events around it are in Kafka, so the source moves past it; a batch
// of filtered events only is done without any send.
func TestRunnerFiltered(t *testing.T) {
	router := routerFunc(func(ctx context.Context, e *Event) (Message, error) {
		msg, err := NewRouting(Routing{}).Route(ctx, e)
		msg.Filtered = strings.HasPrefix(e.ID, "drop")
		return msg, err
	})
	k := newBroker()
	o := newOutcomes()
	var mu sync.Mutex
	runs := 0
	src := script(&runs, &mu, func() []Batch {
		return []Batch{batch(o.done("a"), "ok1", "drop1", "ok2"), batch(o.done("b"), "drop2", "drop3"), batch(o.done("c"), "ok3")}
	})
	run := start(t, src, k.sink(), RunnerConfig{}, WithRouter(router))
	o.wait(t, 3)
	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := k.publishedOn(ownTopic); !slices.Equal(got, []string{"ok1", "ok2", "ok3"}) {
		t.Fatalf("published %v; want [ok1 ok2 ok3]", got)
	}
	if got := o.list(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Done calls %v; want [a b c], in order and without errors", got)
	}
}

// TestRunnerRestartLines: each restart is one WARN line saying why. A
// source that cannot connect is named with its address, and no line says
// that a connection was lost or that events are dropped, since nothing
// was in flight; any other failure is an interrupted run.
func TestRunnerRestartLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"cannot connect", &ConnectError{Service: "Kafka", Addr: "127.0.0.1:1", Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")},
			`level=WARN msg="cannot connect to Kafka; retrying" addr=127.0.0.1:1 err="dial tcp 127.0.0.1:1: connect: connection refused" retry_in=`},
		{"wrapped", fmt.Errorf("open the checkpoint store: %w", &ConnectError{Service: "PostgreSQL", Addr: "db:5432", Err: errors.New("no answer")}),
			`level=WARN msg="cannot connect to PostgreSQL; retrying" addr=db:5432 err="no answer" retry_in=`},
		{"interrupted", errors.New("connection reset by peer"),
			`level=WARN msg="relay interrupted; restarting from the last checkpoint" err="connection reset by peer" retry_in=`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l logs
			var mu sync.Mutex
			runs := 0
			src := fakeSource{run: func(ctx context.Context, out chan<- Batch) error {
				mu.Lock()
				defer mu.Unlock()
				if runs++; runs <= 3 {
					return tc.err
				}
				<-ctx.Done()
				return nil
			}}
			run := start(t, src, newBroker().sink(), RunnerConfig{}, WithLogger(l.logger()))
			deadline := time.Now().Add(wait)
			for strings.Count(l.String(), "level=WARN") < 3 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(l.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines for 3 restarts, want 3:\n%s", len(lines), l.String())
			}
			for _, line := range lines {
				if !strings.Contains(line, tc.want) {
					t.Errorf("restart line %q, want %q", line, tc.want)
				}
			}
		})
	}
}
