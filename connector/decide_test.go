package connector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestDecide: what becomes of a run's error, the one place that decides
// about an event that can never be published.
func TestDecide(t *testing.T) {
	bad := &EventError{EventID: "bad", Err: errors.New(`aggregate type "order lines" is no legal topic name`)}
	refused := &deadLetterRefusedError{cause: bad, refusal: errors.New("INVALID_RECORD")}
	smallest := &deadLetterRefusedError{cause: bad, refusal: errors.New("INVALID_RECORD"), minimal: true}
	all := situation{deadLetterTopic: true, room: true, canQuarantine: true}
	for _, tc := range []struct {
		name  string
		err   error
		s     situation
		want  verdict
		event *EventError // nil: none
		// refused: the decision carries the dead letter refusal.
		refused bool
	}{
		{name: "lost connection restarts", err: errors.New("connection reset by peer"), s: all, want: restart},
		{name: "permanent stops", err: Permanent(errors.New(`relation "outbox" does not exist`)), s: all, want: stop},
		{name: "an event marked permanent stops, even with a dead letter topic", err: Permanent(bad), s: all, want: stop},
		{name: "dead letter topic first", err: bad, s: all, want: deadLetter, event: bad},
		{name: "dead letter topic, wrapped", err: fmt.Errorf("publish: %w", bad), s: situation{deadLetterTopic: true, room: true}, want: deadLetter, event: bad},
		{name: "dead letter topic, poisoned set full", err: bad, s: situation{deadLetterTopic: true, canQuarantine: true}, want: stop, event: bad},
		{name: "no dead letter topic: the source's quarantine", err: bad, s: situation{room: true, canQuarantine: true}, want: quarantine, event: bad},
		{name: "no dead letter topic, no quarantine: stop naming the event", err: bad, s: situation{room: true}, want: stop, event: bad},
		{name: "refused with a batch: alone first, with a dead letter topic", err: bad, s: situation{deadLetterTopic: true, room: true, inBatch: true}, want: tryAlone, event: bad},
		{name: "refused with a batch: alone first, not quarantined", err: bad, s: situation{room: true, canQuarantine: true, inBatch: true}, want: tryAlone, event: bad},
		{name: "refused with a batch: alone first, not a stop", err: bad, s: situation{room: true, inBatch: true}, want: tryAlone, event: bad},
		{name: "refused with a batch, poisoned set full: as refused alone", err: bad, s: situation{canQuarantine: true, inBatch: true}, want: quarantine, event: bad},
		{name: "refused with a batch but permanent: stop", err: Permanent(bad), s: situation{room: true, inBatch: true}, want: stop},
		{name: "dead letter refused: the smallest next", err: refused, s: all, want: deadLetter, event: bad, refused: true},
		{name: "dead letter refused, poisoned set full", err: refused, s: situation{deadLetterTopic: true}, want: restart},
		{name: "smallest dead letter refused: stop", err: smallest, s: all, want: stop, event: bad, refused: true},
		{name: "quarantine failed: restart", err: &quarantineError{event: bad, err: errors.New("connection reset by peer")}, s: situation{room: true}, want: restart},
		{name: "quarantine failed for good: stop", err: &quarantineError{event: bad, err: Permanent(errors.New("row too large"))}, s: situation{room: true}, want: stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.err, tc.s)
			if d.verdict != tc.want {
				t.Errorf("verdict %s; want %s", d.verdict, tc.want)
			}
			if d.event != tc.event {
				t.Errorf("event %v; want %v", d.event, tc.event)
			}
			if (d.refused != nil) != tc.refused {
				t.Errorf("refused %v; want it set: %v", d.refused, tc.refused)
			}
		})
	}
}

// quarantining is a source with a store of its own, as the poller: each
// Run offers what the store holds in one batch, takes it out when Done
// says it is in Kafka, and in Quarantine counts a failed attempt of the
// event, moving it out after maxAttempts. log records, in order, its
// runs, Done calls, quarantines and stops.
type quarantining struct {
	maxAttempts int
	txn         bool    // batches carry a Prepare, as the poller's in exactly_once
	qerrs       []error // Quarantine's answers, in turn; nil past the end

	mu       sync.Mutex
	rows     []Event
	attempts map[string]int
	moved    []string
	log      []string
}

func (q *quarantining) record(s string) {
	q.mu.Lock()
	q.log = append(q.log, s)
	q.mu.Unlock()
}

func (q *quarantining) calls() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.log)
}

func (q *quarantining) Run(ctx context.Context, out chan<- Batch) error {
	q.mu.Lock()
	q.log = append(q.log, "run")
	rows := slices.Clone(q.rows)
	q.mu.Unlock()
	if len(rows) > 0 {
		failed := false
		b := Batch{Events: rows}
		b.Done = func(err error) {
			q.mu.Lock()
			defer q.mu.Unlock()
			if err != nil {
				failed = true
				q.log = append(q.log, "done!")
				return
			}
			q.log = append(q.log, "done")
			q.rows = slices.DeleteFunc(q.rows, func(e Event) bool {
				return slices.ContainsFunc(rows, func(r Event) bool { return r.ID == e.ID })
			})
		}
		b.Quarantine = func(_ context.Context, cause *EventError) error {
			q.mu.Lock()
			defer q.mu.Unlock()
			if !failed || ctx.Err() != nil {
				q.log = append(q.log, "quarantine out of turn")
			}
			q.log = append(q.log, "quarantine "+cause.EventID)
			if len(q.qerrs) > 0 {
				err := q.qerrs[0]
				q.qerrs = q.qerrs[1:]
				if err != nil {
					return err
				}
			}
			q.attempts[cause.EventID]++
			if q.attempts[cause.EventID] >= q.maxAttempts {
				q.rows = slices.DeleteFunc(q.rows, func(e Event) bool { return e.ID == cause.EventID })
				q.moved = append(q.moved, cause.EventID)
			}
			return nil
		}
		if q.txn {
			b.Prepare = func(context.Context) error { return nil }
		}
		offer(ctx, out, b)
	}
	<-ctx.Done()
	q.record("stopped")
	return nil
}

// TestRunnerQuarantine: without a dead letter topic, an event that can
// never be published goes into the quarantine of a source that has one:
// the runner asks for it once per failure, after the batch's Done and
// before it stops the source, and restarts the source, which offers the
// event again until it moves it out, and the relay goes on. With a dead
// letter topic the quarantine is never asked; a quarantine that fails for
// good stops the relay with its error; one that fails otherwise is asked
// again on the next failure. An event the broker refused, which it does
// for a whole batch, is published alone by the next run first: only its
// refusal alone counts an attempt.
func TestRunnerQuarantine(t *testing.T) {
	invalid := Event{ID: "bad", AggregateType: "order", Payload: []byte(`{}`),
		Invalid: &EventError{EventID: "bad", Err: errors.New(`column "aggregateid" is missing or NULL`)}}
	refusedByBroker := ev("bad", "order")
	failTwice := []string{"run", "done!", "quarantine bad", "stopped", "run", "done!", "quarantine bad", "stopped", "run", "done"}
	aloneFirst := append([]string{"run", "done!", "stopped"}, failTwice...)
	tooLarge := Permanent(errors.New("its row is too large to copy into the dead-letter table"))
	for _, tc := range []struct {
		name string
		bad  Event
		// refuse: the broker refuses the bad event (rather than the
		// runner finding it invalid).
		refuse bool
		txn    bool
		dlq    string
		qerrs  []error
		// want is the source's log; wantErr what Run returns (nil: it goes
		// on until stopped).
		want      []string
		wantErr   error
		wantMoved []string
	}{
		{name: "invalid row", bad: invalid, want: failTwice, wantMoved: []string{"bad"}},
		{name: "refused by the broker", bad: refusedByBroker, refuse: true, want: aloneFirst, wantMoved: []string{"bad"}},
		{name: "refused in a Kafka transaction", bad: refusedByBroker, refuse: true, txn: true, want: aloneFirst, wantMoved: []string{"bad"}},
		{name: "a dead letter topic takes it instead", bad: invalid, dlq: "dlq", want: []string{"run", "done"}},
		{
			name: "quarantine fails once: asked again", bad: invalid, qerrs: []error{errors.New("connection reset by peer")},
			want:      []string{"run", "done!", "quarantine bad", "stopped", "run", "done!", "quarantine bad", "stopped", "run", "done!", "quarantine bad", "stopped", "run", "done"},
			wantMoved: []string{"bad"},
		},
		{
			name: "quarantine fails for good: Run stops with its error", bad: invalid, qerrs: []error{tooLarge},
			want: []string{"run", "done!", "quarantine bad", "stopped"}, wantErr: tooLarge,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			if tc.refuse {
				k.outcome = func(m *Message, _ int) error {
					if m.EventID == "bad" && m.Topic == ownTopic {
						return &EventError{EventID: "bad", Err: errors.New("the broker refused the record: INVALID_RECORD")}
					}
					return nil
				}
			}
			src := &quarantining{maxAttempts: 2, txn: tc.txn, qerrs: tc.qerrs, attempts: map[string]int{},
				rows: []Event{ev("ok1", "order"), tc.bad, ev("ok2", "order")}}
			var snk Sink = k.sink()
			if tc.txn {
				snk = k.txnSink()
			}
			run := start(t, src, snk, RunnerConfig{DeadLetterTopic: tc.dlq})
			if tc.wantErr != nil {
				err := run.result(t)
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), `event bad`) {
					t.Fatalf("Run: %v; want %v, naming event bad", err, tc.wantErr)
				}
			} else {
				k.until(t, "the source's store emptied", func() bool {
					src.mu.Lock()
					defer src.mu.Unlock()
					return len(src.rows) == 0
				})
				if err := run.stop(t); err != nil {
					t.Fatalf("Run: %v; want it to go on until stopped", err)
				}
			}
			if got := src.calls(); !slices.Equal(got, append(slices.Clone(tc.want), "stopped")) && !slices.Equal(got, tc.want) {
				t.Errorf("the source saw %v; want %v", got, tc.want)
			}
			src.mu.Lock()
			moved := src.moved
			src.mu.Unlock()
			if !slices.Equal(moved, tc.wantMoved) {
				t.Errorf("moved out of the store %v; want %v", moved, tc.wantMoved)
			}
			got := k.publishedOn(ownTopic)
			if tc.txn {
				k.mu.Lock()
				got = on(k.committed, ownTopic)
				k.mu.Unlock()
			}
			if tc.wantErr == nil && (len(got) < 2 || !slices.Equal(got[len(got)-2:], []string{"ok1", "ok2"})) {
				t.Errorf("%s got %v; want it to end with ok1 ok2", ownTopic, got)
			}
			if slices.Contains(got, "bad") && !tc.refuse {
				t.Errorf("%s got %v; the invalid event bad cannot be published", ownTopic, got)
			}
			if tc.dlq != "" {
				if _, ok := k.find(tc.dlq, "bad"); !ok {
					t.Errorf("event bad is not on the dead letter topic; calls %v", k.callLog())
				}
			}
		})
	}
}

// TestRunnerBatchRefused: the broker refuses a whole batch as too large
// for a record in it that the sink's own check let through (the topic's
// own, smaller, limit was not known yet), so every event of the batch
// fails, the innocent first. Whatever the dead letter setting, the relay
// ends by naming the event that is really too large: it stops naming it,
// the source quarantines it, or it goes to the dead letter topic; an
// innocent neighbour is never named, quarantined or dead lettered, and
// reaches its topic. learn: the sink knows the topic's limit after the
// first refusal, as it does once its lookup is back, and refuses the
// large event itself; else only the broker does, each time.
func TestRunnerBatchRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dlq   string
		learn bool
		// quarantines: the source has a store of its own, as the poller.
		quarantines bool
	}{
		{name: "stop, the limit learned", learn: true},
		{name: "stop, the broker refusing each time"},
		{name: "quarantine, the limit learned", quarantines: true, learn: true},
		{name: "quarantine, the broker refusing each time", quarantines: true},
		{name: "dead letter topic, the limit learned", dlq: "dlq", learn: true},
		{name: "dead letter topic, the broker refusing each time", dlq: "dlq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newBroker()
			big := ev("big", "order")
			big.Payload = bytes.Repeat([]byte("x"), 1000)
			k.outcome = func(m *Message, n int) error {
				first := n == 0 && len(k.limit) == 0 && m.Topic == ownTopic
				if !first && m.EventID != "big" || m.Topic != ownTopic {
					return nil
				}
				if tc.learn && m.EventID == "big" {
					k.limit = map[string]int{ownTopic: 500}
				}
				return &EventError{EventID: m.EventID, Err: &RecordTooLargeError{Size: m.Size(), Cause: errors.New("MESSAGE_TOO_LARGE")}}
			}
			rows := []Event{ev("ok1", "order"), big, ev("ok2", "order")}
			var src Source
			q := &quarantining{maxAttempts: 1, attempts: map[string]int{}, rows: rows}
			if tc.quarantines || tc.dlq != "" {
				src = q
			} else {
				var mu sync.Mutex
				runs := 0
				src = script(&runs, &mu, func() []Batch { return []Batch{{Events: rows, Done: func(error) {}}} })
			}
			run := start(t, src, k.sink(), RunnerConfig{DeadLetterTopic: tc.dlq})
			if src != q {
				err := run.result(t)
				var ee *EventError
				if !errors.As(err, &ee) || ee.EventID != "big" || !IsPermanent(err) || !strings.Contains(err.Error(), "max") {
					t.Fatalf("Run: %v; want a permanent error naming event big and the limit", err)
				}
				if got := k.publishedOn(ownTopic); !slices.Contains(got, "ok1") {
					t.Errorf("%s got %v; want ok1, published alone before the relay stopped", ownTopic, got)
				}
				return
			}
			k.until(t, "the source's store emptied", func() bool {
				q.mu.Lock()
				defer q.mu.Unlock()
				return len(q.rows) == 0
			})
			if err := run.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, c := range q.calls() {
				if strings.HasPrefix(c, "quarantine ") && c != "quarantine big" {
					t.Errorf("the source was asked to %s; only big is too large (calls %v)", c, q.calls())
				}
			}
			q.mu.Lock()
			moved := q.moved
			q.mu.Unlock()
			if tc.dlq == "" && !slices.Equal(moved, []string{"big"}) {
				t.Errorf("moved out of the store %v; want [big]", moved)
			}
			if got := k.publishedOn("dlq"); tc.dlq != "" && !slices.Equal(got, []string{"big"}) {
				t.Errorf("dead letter topic got %v; want [big]", got)
			}
			// The broker took none of big's: those it refused are left out.
			got := slices.DeleteFunc(k.publishedOn(ownTopic), func(id string) bool { return id == "big" })
			if len(got) < 2 || !slices.Equal(got[len(got)-2:], []string{"ok1", "ok2"}) {
				t.Errorf("%s got %v; want it to end with ok1 ok2", ownTopic, got)
			}
		})
	}
}
