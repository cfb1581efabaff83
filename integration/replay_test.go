package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// `outboxrelay replay` beside a running relay: 3,000 events committed and
// relayed, then replayed by their commit times while new events flow at
// 600/s. Every one of the 3,000 is in Kafka once more, marked with the
// replay's id, each aggregate's in commit order; none of the new ones is
// replayed or lost; and the relay's checkpoint counts only what the
// relay published, under its own key, the only one in its topic.
func TestReplayBesideRunningRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.PostgresServerWith(t, map[string]string{"track_commit_timestamp": "on"})
	url := srv.URL("postgres")
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	name := uniqueName(t)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, cdcYAML(name)))
	relay := startBinary(t, []string{"run", "--config", cfg})
	waitSlotActive(ctx, t, pool, name)
	c := newCollector(t, brokers, "outbox.event.order")

	since := serverNow(ctx, t, pool)
	workload{table: "outbox", writers: 4, aggregates: 40, events: 3000, txnSize: 5}.write(ctx, t, pool)
	until := serverNow(ctx, t, pool)
	first := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, first, time.Minute)

	flow := startFlow(ctx, t, pool, 600)
	out, err := replayCommand(t, nil, "replay", "--config", cfg, "--since", since.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano)).CombinedOutput()
	live := flow.stop(t)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	t.Logf("replay:\n%s", lastLines(string(out), 3))
	id := replayID(t, out)
	if !strings.Contains(string(out), "published 3000 of 3000 rows chosen again") {
		t.Errorf("the replay's last line does not count 3000 of 3000:\n%s", out)
	}
	all := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, all, time.Minute)
	c.settle(500 * time.Millisecond)
	t.Logf("%d events flowed during the replay", len(live))

	replayed := checkReplayed(t, c, first, id)
	for lid := range live {
		if replayed[lid] > 0 {
			t.Errorf("event %s, committed after the range, was replayed", lid)
		}
	}
	if code := relay.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("relay exit code %d after SIGTERM", code)
	}
	checkRelayCheckpoint(ctx, t, url, name, brokers, c)
}

// checkReplayed checks that every event of rows has exactly one record
// marked with replay id, and that each aggregate's come in commit order;
// it returns the marked records by event id.
func checkReplayed(t *testing.T, c *collector, rows map[string]row, id string) map[string]int {
	t.Helper()
	marked := map[string]int{}
	lastSeq := map[string]int{}
	for _, r := range c.recs {
		rid := header(r, "outboxrelay.replay")
		if rid == "" {
			continue
		}
		if rid != id {
			t.Errorf("record %s/%d@%d is marked with replay %q, want %q", r.Topic, r.Partition, r.Offset, rid, id)
		}
		eid := header(r, "id")
		marked[eid]++
		want, ok := rows[eid]
		if !ok {
			continue
		}
		if string(r.Value) != want.payload || string(r.Key) != want.aggID {
			t.Errorf("replayed event %s: key %q value %q, want %q %q", eid, r.Key, r.Value, want.aggID, want.payload)
		}
		seq := payloadSeq(t, want.payload)
		if prev := lastSeq[want.aggID]; seq <= prev {
			t.Errorf("aggregate %s: replayed event %d after event %d (out of commit order)", want.aggID, seq, prev)
		}
		lastSeq[want.aggID] = seq
	}
	for eid := range rows {
		if marked[eid] != 1 {
			t.Errorf("event %s was replayed %d times, want once", eid, marked[eid])
		}
	}
	return marked
}

// checkRelayCheckpoint checks that the relay's checkpoint is its own: the
// only key in the checkpoint topic, counting as many events as Kafka has
// records from the relay (those not marked as replayed).
func checkRelayCheckpoint(ctx context.Context, t *testing.T, url, slot string, brokers []string, c *collector) {
	t.Helper()
	id, err := cdc.Identify(ctx, url, pgsql.Network{})
	if err != nil {
		t.Fatal(err)
	}
	key := id.CheckpointKey(slot)
	st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: brokers}, "", key)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp, found, err := st.Load(ctx)
	if err != nil || !found {
		t.Fatalf("the relay's checkpoint: found %v, %v", found, err)
	}
	relayed := 0
	for _, r := range c.recs {
		if header(r, "outboxrelay.replay") == "" {
			relayed++
		}
	}
	if cp.Events != int64(relayed) {
		t.Errorf("the relay's checkpoint counts %d events; Kafka has %d records the relay published", cp.Events, relayed)
	}
	keys := topicKeys(ctx, t, brokers, sink.DefaultCheckpointTopic)
	for k := range keys {
		if k != key.String() {
			t.Errorf("the checkpoint topic holds a record under %q, not the relay's key %q", k, key.String())
		}
	}
}

// topicKeys reads a topic from its start and returns its record keys.
func topicKeys(ctx context.Context, t *testing.T, brokers []string, topic string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := map[string]int{}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { keys[string(r.Key)]++ })
		cancel()
	}
	return keys
}

// A replay stopped by Ctrl-C (SIGINT) lets its batch under way finish,
// says how far it got and how to resume, and exits 1; --resume carries
// on from there. Each row is replayed once in all, chosen here by a
// column holding the insert time (the server keeps no commit times), at
// least once and exactly once.
func TestReplayStopAndResume(t *testing.T) {
	t.Parallel()
	t.Run("at least once", func(t *testing.T) { testReplayStopAndResume(t) })
	t.Run("exactly once", func(t *testing.T) { testReplayStopAndResume(t, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once") })
}

func testReplayStopAndResume(t *testing.T, env ...string) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createTimestampedOutbox(t, pool)
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	since := serverNow(ctx, t, pool)
	workload{table: "outbox", writers: 2, aggregates: 20, events: 3000, txnSize: 10}.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, ""))

	p := startBinary(t, []string{"replay", "--config", cfg, "--since", since.Format(time.RFC3339Nano), "--timestamp-column", "created_at",
		"--rate", "1000", "--batch-size", "100", "--metrics-listen", "127.0.0.1:0"}, env...)
	waitLog(t, p, "replay starting", time.Minute)
	// While it runs, its own /metrics count what it does; at --rate 1000
	// it takes three seconds at least, and is stopped once some rows are
	// in Kafka again.
	addr := regexp.MustCompile(`msg="serving metrics".* addr=(\S+)`).FindStringSubmatch(p.out.String())
	if addr == nil {
		t.Fatalf("the replay does not say where it serves its metrics:\n%s", p.out.String())
	}
	someDone := regexp.MustCompile(`(?m)^outboxrelay_replayed_total [1-9]`)
	var scraped string
	for deadline := time.Now().Add(time.Minute); !someDone.MatchString(scraped) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		scraped = scrape(t, "http://"+addr[1]+"/metrics")
	}
	if !strings.Contains(scraped, "outboxrelay_replay_rows_chosen 3000") || !someDone.MatchString(scraped) {
		t.Errorf("the replay's metrics do not count 3000 rows chosen and some replayed:\n%s", scraped)
	}
	if code := p.signal(t, syscall.SIGINT, time.Minute); code != 1 {
		t.Fatalf("replay exit code %d after SIGINT, want 1 (stopped before the end)", code)
	}
	out := p.out.String()
	m := regexp.MustCompile(`stopped after (\d+) of 3000 rows chosen`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" || m[1] == "3000" {
		t.Fatalf("the stopped replay does not say it stopped part way:\n%s", out)
	}
	t.Logf("stopped after %s rows", m[1])
	resume := regexp.MustCompile(`--resume (\S+)`).FindStringSubmatch(out)
	if resume == nil {
		t.Fatalf("the stopped replay does not say how to resume:\n%s", out)
	}
	res, err := replayCommand(t, env, "replay", "--config", cfg, "--resume", resume[1]).CombinedOutput()
	if err != nil || !strings.Contains(string(res), "published 3000 of 3000 rows chosen again") {
		t.Fatalf("resume: %v\n%s", err, res)
	}
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, rows, time.Minute)
	c.settle(500 * time.Millisecond)
	checkReplayed(t, c, rows, resume[1])

	// Resumed once finished, it has nothing to do.
	res, err = replayCommand(t, env, "replay", "--config", cfg, "--resume", resume[1]).CombinedOutput()
	if err != nil || !strings.Contains(string(res), "finished already") {
		t.Errorf("a finished replay resumed: %v\n%s", err, res)
	}
}

// A replay whose rows cannot be told by their commit time refuses,
// naming what would let it; a dry run counts and shows, publishing
// nothing.
func TestReplayRefusesAndDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	workload{table: "outbox", writers: 1, aggregates: 2, events: 20}.write(ctx, t, pool)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, ""))
	out, err := replayCommand(t, nil, "replay", "--config", cfg, "--since", "2020-01-01T00:00:00Z").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "--timestamp-column") || !strings.Contains(string(out), "track_commit_timestamp") {
		t.Errorf("a range nothing can tell: exit %d, want 1 and a refusal naming the fixes:\n%s", exitCode(err), out)
	}
	out, err = replayCommand(t, nil, "replay", "--config", cfg, "--aggregate", "order:agg-1", "--dry-run", "--show", "3").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10 rows chosen") || strings.Count(string(out), "→ topic outbox.event.order") != 3 || !strings.Contains(string(out), "Nothing was published") {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if keys := topicKeys(ctx, t, brokers, "outbox.event.order"); len(keys) != 0 {
		t.Errorf("a dry run published %d keys", len(keys))
	}
	missing := "00000000-0000-0000-0000-000000000001"
	out, err = replayCommand(t, nil, "replay", "--config", cfg, "--id", missing).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "1 of the 1 ids given are in no outbox table") || !strings.Contains(string(out), "--partial") {
		t.Errorf("an id no table holds: exit %d, want 1 and a refusal counting it:\n%s", exitCode(err), out)
	}
}

// scrape gets url's body.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// With the poller the same command works on its table: the rows it
// published, told by its published column, ordered by its order column.
func TestReplayPoller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	applyBinaryPollDDL(t, url)
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, "source: poll\npoll:\n  interval: 100ms\n"))
	startBinary(t, []string{"run", "--config", cfg})
	since := serverNow(ctx, t, pool)
	workload{table: "outbox", writers: 2, aggregates: 10, events: 500, txnSize: 5}.write(ctx, t, pool)
	rows := readRows(ctx, t, pool, "outbox")
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, rows, time.Minute)
	// Every row marked published, so that the replay chooses them all.
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows not marked published after a minute", waiting)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := replayCommand(t, nil, "replay", "--config", cfg, "--since", since.Format(time.RFC3339Nano)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "published 500 of 500 rows chosen again") {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "published column") {
		t.Errorf("the replay does not say it told commit times by the published column:\n%s", out)
	}
	c.settle(time.Second)
	checkReplayed(t, c, rows, replayID(t, out))
}

// replayCommand is the binary with args and the test's environment plus
// env.
func replayCommand(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// replayID is the replay's id from its last line.
func replayID(t *testing.T, out []byte) string {
	t.Helper()
	m := regexp.MustCompile(`outboxrelay replay (r\S+):`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no replay id in the output:\n%s", out)
	}
	return string(m[1])
}

// serverNow is the server's clock.
func serverNow(ctx context.Context, t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// flow writes events of aggregates of its own at a steady rate until
// stopped.
type flow struct {
	stopped chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	rows    map[string]row
	err     error
}

// startFlow writes perSecond events a second, a tenth of them every
// 100ms in one transaction, each aggregate numbering its own.
func startFlow(ctx context.Context, t *testing.T, pool *pgxpool.Pool, perSecond int) *flow {
	f := &flow{stopped: make(chan struct{}), done: make(chan struct{}), rows: map[string]row{}}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		seq := 0
		for {
			select {
			case <-f.stopped:
				return
			case <-tick.C:
			}
			seq++
			if err := f.write(ctx, pool, seq, perSecond/10); err != nil {
				f.err = err
				return
			}
		}
	}()
	return f
}

func (f *flow) write(ctx context.Context, pool *pgxpool.Pool, seq, n int) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			agg := fmt.Sprintf("live-%d", i)
			payload, _ := json.Marshal(map[string]any{"aggregate": agg, "seq": seq})
			var id string
			if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'Happened', $2) RETURNING id::text, payload::text`,
				agg, string(payload)).Scan(&id, new(string)); err != nil {
				return err
			}
			f.mu.Lock()
			f.rows[id] = row{id: id, aggType: "order", aggID: agg}
			f.mu.Unlock()
		}
		return nil
	})
}

// stop stops the flow and returns what it wrote.
func (f *flow) stop(t *testing.T) map[string]row {
	t.Helper()
	close(f.stopped)
	<-f.done
	if f.err != nil {
		t.Fatalf("the flow of new events: %v", f.err)
	}
	return f.rows
}
