package integration

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// bigOutboxDDL is the outbox table with text columns where the default has
// varchar(255), so that a row can carry a 2 MB aggregate type or id.
const bigOutboxDDL = `CREATE TABLE outbox (
	id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	aggregatetype text NOT NULL,
	aggregateid   text NOT NULL,
	type          varchar(255) NOT NULL,
	payload       jsonb
)`

// badDeadLetter is a bad event whose dead letter record, as it is, would be
// larger than the broker's 1 MiB, and what its dead letter must leave out.
type badDeadLetter struct {
	name           string
	aggType, aggID string
	payload        string
	id             string
	// omitted are the markers the dead letter must carry.
	omitted []string
}

// testBadInputDeadLetterTooLarge runs the relay binary against a broker
// that takes records of at most 1 MiB, with a dead letter topic, and
// commits three events whose dead letter records would be larger than
// that (an illegal aggregate type with a 2 MB payload, a 2 MB aggregate
// id, a 2 MB illegal aggregate type, which the error header quotes), then
// a good one. Each bad event must land on the dead letter
// topic, with markers saying what its record leaves out, logged as an
// ERROR with its id, and the good one must follow, with no restart
// (before, the relay restarted from its checkpoint for ever and the good
// event never came). env is added to the relay's environment.
func testBadInputDeadLetterTooLarge(t *testing.T, poll bool, maxRestarts int, env ...string) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	if _, err := pool.Exec(ctx, bigOutboxDDL); err != nil {
		t.Fatal(err)
	}
	_, brokers := testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "1048576"}))
	slot := uniqueName(t)
	cfg := yamlConfig(url, brokers, cdcYAML(slot))
	if poll {
		applyBinaryPollDDL(t, url)
		cfg = yamlConfig(url, brokers, "source: poll\npoll:\n  interval: 100ms\n")
	}
	p := runBinary(t, cfg, append([]string{"OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC=outbox.deadletter"}, env...)...)
	if !poll {
		waitSlotActive(ctx, t, pool, slot)
	}

	const mb2 = 2 << 20
	bad := []*badDeadLetter{
		{name: "illegal aggregate type, 2 MB payload", aggType: "bad type", aggID: "a",
			payload: `{"blob": "` + strings.Repeat("x", mb2) + `"}`, omitted: []string{connector.HeaderOmittedValue}},
		{name: "2 MB aggregate id", aggType: "order", aggID: strings.Repeat("k", mb2),
			payload: `{"seq": 2}`, omitted: []string{connector.HeaderOmittedKey}},
		// Its error quotes only the type's first 300 bytes, so nothing
		// of the dead letter needs leaving out (every header is checked
		// to be small below).
		{name: "2 MB illegal aggregate type", aggType: strings.Repeat("t", mb2) + " !", aggID: "a",
			payload: `{"seq": 3}`},
	}
	insert := func(aggType, aggID, payload string) string {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'T', $3) RETURNING id::text`,
			aggType, aggID, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, b := range bad {
		b.id = insert(b.aggType, b.aggID, b.payload)
	}
	good := insert("order", "a", `{"seq": 4}`)

	c := newCollector(t, brokers, "outbox.event.order", "outbox.deadletter")
	want := map[string]row{good: {}}
	for _, b := range bad {
		want[b.id] = row{}
	}
	start := time.Now()
	c.waitFor(t, want, 90*time.Second)
	t.Logf("every event was in Kafka %s after the last insert", time.Since(start).Round(time.Millisecond))
	c.settle(time.Second)

	byID := map[string][]*kgo.Record{}
	for _, r := range c.recs {
		byID[header(r, "id")] = append(byID[header(r, "id")], r)
	}
	// At least once, a restart may publish an event again; exactly once,
	// a read_committed consumer sees it once.
	once := slices.Contains(env, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once")
	only := func(recs []*kgo.Record, topic string) bool {
		for _, r := range recs {
			if r.Topic != topic {
				return false
			}
		}
		return len(recs) == 1 || len(recs) > 1 && !once
	}
	if recs := byID[good]; !only(recs, "outbox.event.order") {
		t.Errorf("the good event: %d records, want it on outbox.event.order only (once with exactly_once)", len(recs))
	}
	out := p.out.String()
	for _, b := range bad {
		recs := byID[b.id]
		if !only(recs, "outbox.deadletter") {
			t.Errorf("%s (event %s): %d records, want it on outbox.deadletter only (once with exactly_once)", b.name, b.id, len(recs))
			continue
		}
		r := recs[0]
		if header(r, connector.HeaderError) == "" {
			t.Errorf("%s: the dead letter has no %s header", b.name, connector.HeaderError)
		}
		for _, k := range b.omitted {
			n, err := strconv.Atoi(header(r, k))
			if err != nil || n < mb2 {
				t.Errorf("%s: marker %s is %q, want the size of what was left out (over %d)", b.name, k, header(r, k), mb2)
			}
		}
		for _, h := range r.Headers {
			if len(h.Value) > connector.DeadLetterHeaderBytes && h.Key != "id" {
				t.Errorf("%s: header %s is %d bytes", b.name, h.Key, len(h.Value))
			}
		}
		if !regexp.MustCompile(`level=ERROR msg="event cannot be published; sending it to the dead letter topic" .*event_id=` + b.id).MatchString(out) {
			t.Errorf("%s: no ERROR naming event %s", b.name, b.id)
		}
	}
	if n := strings.Count(out, "relay interrupted"); n > maxRestarts {
		t.Errorf("the relay restarted %d times (at most %d expected); the log's last lines:\n%s", n, maxRestarts, lastLines(out, 20))
	}
	if n := strings.Count(out, "relay interrupted"); n > 0 {
		t.Logf("%d restarts", n)
	}
	// The log quotes no 2 MB value.
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 64<<10 {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}

// TestBadInputDeadLetterTooLarge: the relay's own size check finds each
// dead letter record too large, so it cuts it to fit at once, with no
// restart.
func TestBadInputDeadLetterTooLarge(t *testing.T) {
	t.Run("cdc", func(t *testing.T) { testBadInputDeadLetterTooLarge(t, false, 0) })
	t.Run("poll", func(t *testing.T) { testBadInputDeadLetterTooLarge(t, true, 0) })
	t.Run("cdc_exactly_once", func(t *testing.T) {
		testBadInputDeadLetterTooLarge(t, false, 0, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once")
	})
}

// TestBadInputDeadLetterTooLargeBrokerRefuses: the relay is told a limit
// larger than the broker's, so its own check lets the dead letter records
// through and the broker refuses them. The relay learns that only from the
// refusal, after which the run ends; the next sends the smallest dead
// letter record. A few restarts, not a loop.
func TestBadInputDeadLetterTooLargeBrokerRefuses(t *testing.T) {
	limit := "OUTBOXRELAY_KAFKA_MAX_RECORD_BYTES=" + strconv.Itoa(8<<20)
	t.Run("cdc", func(t *testing.T) { testBadInputDeadLetterTooLarge(t, false, 6, limit) })
	t.Run("cdc_exactly_once", func(t *testing.T) {
		testBadInputDeadLetterTooLarge(t, false, 9, limit, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once")
	})
}

// TestBadInputDeadLetterTooLargePollTable: with source: poll and no dead
// letter topic, a row Kafka can never take moves to the dead-letter table
// after poll.max_attempts. Neither a reason of 4 MB (an error quoting a 2
// MB aggregate type twice) nor a json payload holding \u0000, which json
// takes and jsonb (the table's outbox_row) refuses, may make that move
// fail: before, the second failed on every claim, for ever, and the rows
// after it never came.
func TestBadInputDeadLetterTooLargePollTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	if _, err := pool.Exec(ctx, strings.Replace(bigOutboxDDL, "payload       jsonb", "payload       json", 1)); err != nil {
		t.Fatal(err)
	}
	_, brokers := testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "1048576"}))
	applyBinaryPollDDL(t, url)
	p := runBinary(t, yamlConfig(url, brokers, "source: poll\npoll:\n  interval: 100ms\n  max_attempts: 2\n"))

	insert := func(aggType, aggID, payload string) string {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'T', $3) RETURNING id::text`,
			aggType, aggID, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	hugeType := insert(strings.Repeat("t", 2<<20)+" !", "a", `{"seq": 1}`)
	nul := insert("bad type", "a", `{"seq": 2, "s": "a\u0000b"}`)
	bigKey := insert("order", strings.Repeat("k", 2<<20), `{"seq": 3}`)
	good := insert("order", "a", `{"seq": 4}`)

	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, map[string]row{good: {}}, 90*time.Second)

	type dead struct {
		reason string
		row    string
	}
	got := map[string]dead{}
	rows, err := pool.Query(ctx, `SELECT event_id, reason, outbox_row::text FROM outbox_dead_letter`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var d dead
		if err := rows.Scan(&id, &d.reason, &d.row); err != nil {
			t.Fatal(err)
		}
		got[id] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"2 MB illegal aggregate type": hugeType, "json payload with \\u0000": nul, "2 MB aggregate id": bigKey} {
		d, ok := got[id]
		switch {
		case !ok:
			t.Errorf("%s (event %s) is not in the dead-letter table", name, id)
		case len(d.reason) > 8<<10 || d.reason == "":
			t.Errorf("%s: reason of %d bytes; want a reason, cut to a few KB", name, len(d.reason))
		case !strings.Contains(d.row, id):
			t.Errorf("%s: outbox_row does not hold the row: %.200s", name, d.row)
		}
	}
	if !strings.Contains(got[nul].row, `\\u0000`) {
		t.Errorf("the row with \\u0000 lost it in outbox_row: %.300s", got[nul].row)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM outbox WHERE id::text = ANY($1)`, []string{hugeType, nul, bigKey}); n != 0 {
		t.Errorf("%d bad rows are still in the outbox", n)
	}
	// The poller's own lines quote no 2 MB value. (The app's line for a
	// run that an event stopped quotes the error whole, and so the topic
	// name in it.)
	for _, line := range strings.Split(p.out.String(), "\n") {
		if len(line) > 64<<10 && strings.Contains(line, "component=poll") {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}
