package integration

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The outbox table of Debezium's example with a text payload, which
// PostgreSQL stores as written however deep (jsonb would refuse 100,000
// levels itself).
const outboxTextPayloadDDL = `CREATE SCHEMA inventory;
CREATE TABLE inventory.outboxevent (
	id            uuid NOT NULL PRIMARY KEY,
	aggregatetype varchar(255) NOT NULL,
	aggregateid   varchar(255) NOT NULL,
	type          varchar(255) NOT NULL,
	timestamp     timestamp NOT NULL,
	payload       text
)`

// rssLimit is the memory limit of the shipped Kubernetes manifest, which
// the acceptance states the relay must stay under.
const rssLimit = 256 << 20

// rssWatch follows the peak resident memory (VmHWM) of a running relay
// and kills it the moment the peak passes rssLimit, so that a relay
// growing without bound fails the test within seconds instead of taking
// the machine's memory.
type rssWatch struct {
	mu     sync.Mutex
	peak   int64
	killed bool
	stop   chan struct{}
	done   chan struct{}
}

func watchRSS(t *testing.T, p *proc) *rssWatch {
	t.Helper()
	w := &rssWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if hwm, ok := vmHWM(p.cmd.Process.Pid); ok {
				w.mu.Lock()
				w.peak = max(w.peak, hwm)
				over := w.peak > rssLimit && !w.killed
				if over {
					w.killed = true
				}
				w.mu.Unlock()
				if over {
					_ = p.cmd.Process.Kill()
				}
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *rssWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check fails the test if the relay's peak passed rssLimit.
func (w *rssWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed || w.peak > rssLimit {
		t.Fatalf("the relay's peak resident memory (VmHWM) reached %d MiB, over the %d MiB limit of the Kubernetes manifest; it was killed", w.peak>>20, rssLimit>>20)
	}
}

// log reports the relay's peak, for the record of the run.
func (w *rssWatch) log(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("the relay's peak resident memory (VmHWM): %d MiB", w.peak>>20)
}

// deepJSON is an object nested levels deep, {"a":{"a":...}}: 600 KB for
// 100,000 levels.
func deepJSON(levels int) string {
	return strings.Repeat(`{"a":`, levels-1) + "{}" + strings.Repeat("}", levels-1)
}

// expandRelay starts the relay with the example's connector and
// table.expand.json.payload over a text payload column, and inserts a
// payload nested 100,000 levels deep, then a valid event. It returns the
// two events' ids.
func expandRelay(ctx context.Context, t *testing.T, env ...string) (p *proc, w *rssWatch, brokers []string, bad, good string) {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc to read the relay's peak memory from: %v", err)
	}
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxTextPayloadDDL)
	_, brokers = testenv.Kafka(t)
	content := exampleConnector(pgURL, slot, `, "transforms.outbox.table.expand.json.payload": "true"`)
	p = runDebeziumBinary(t, "c.json", content, append(env, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))...)
	w = watchRSS(t, p)
	bad, good = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	for _, ev := range []struct{ id, payload string }{{bad, deepJSON(100_000)}, {good, `{"seq": 2}`}} {
		if _, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, 'Order', '1', 'OrderCreated', '2019-05-03 13:31:34.484', $2)`,
			ev.id, ev.payload); err != nil {
			t.Fatal(err)
		}
	}
	return p, w, brokers, bad, good
}

// TestBadInputDeepJSONExpansionDeadLetter: a payload nested 100,000
// levels deep, with expansion on, made the relay grow past 2.6 GB and
// crash-loop. It must go to the dead letter topic, whole, with an error
// saying how deep it is and what the limit is, the next event must
// arrive expanded, and the relay must stay under 256 MiB throughout.
func TestBadInputDeepJSONExpansionDeadLetter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const dlt = "outbox.dead"
	p, w, brokers, bad, good := expandRelay(ctx, t, "OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC="+dlt)
	c := newCollector(t, brokers, dlt, "Order.events")
	for deadline := time.Now().Add(2 * time.Minute); c.ids[bad] == 0 || c.ids[good] == 0; {
		w.check(t) // a relay over the limit is killed and will send nothing
		if time.Now().After(deadline) {
			t.Fatalf("after 2m the dead letter (read %v) and the next event (read %v) have not both arrived", c.ids[bad] > 0, c.ids[good] > 0)
		}
		c.poll(ctx)
	}
	w.check(t)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("outboxrelay exited with %d after SIGTERM", code)
	}
	w.check(t)
	w.log(t)
	for _, r := range c.recs {
		switch id := header(r, "id"); id {
		case bad:
			if r.Topic != dlt {
				t.Errorf("the deep payload went to %s, want the dead letter topic %s", r.Topic, dlt)
			}
			msg := header(r, connector.HeaderError)
			for _, want := range []string{"nests 100000 levels deep", "more than the 1000", "maxNestingDepth"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the dead letter's %s header does not say %q: %q", connector.HeaderError, want, msg)
				}
			}
			if string(r.Value) != deepJSON(100_000) {
				t.Errorf("the dead letter holds %d bytes, want the payload's %d", len(r.Value), len(deepJSON(100_000)))
			}
		case good:
			if r.Topic != "Order.events" || !strings.Contains(string(r.Value), `"payload":{"seq":2}`) {
				t.Errorf("the next event went to %s as %s, want Order.events, expanded", r.Topic, r.Value)
			}
		default:
			t.Errorf("unexpected record %s on %s", id, r.Topic)
		}
	}
	if out := p.out.String(); !strings.Contains(out, "sending it to the dead letter topic") || !strings.Contains(out, bad) {
		t.Errorf("the relay did not log the dead letter naming the event %s", bad)
	}
}

// TestBadInputDeepJSONExpansionStops: without a dead letter topic, the
// relay stops with an ERROR naming the event and the problem, within
// 256 MiB, instead of growing until it is killed and doing it again.
func TestBadInputDeepJSONExpansionStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, w, _, bad, _ := expandRelay(ctx, t)
	code := p.exit(t, 2*time.Minute)
	w.end()
	w.check(t)
	w.log(t)
	if code == 0 {
		t.Errorf("outboxrelay exited with 0 on an event it could not publish")
	}
	// The relay's last word is the ERROR record of the error it stopped with.
	out := p.out.String()
	last := p.stopReason(t)
	for _, want := range []string{"outbox event " + bad, "nests 100000 levels deep", "more than the 1000"} {
		if !strings.Contains(last, want) {
			t.Errorf("the error the relay stopped with does not say %q: %s", want, last)
		}
	}
	if strings.Contains(out, "restarting from the last checkpoint") {
		t.Errorf("the relay restarted on an event that fails for good:\n%s", lastLines(out, 10))
	}
}
