package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// Five events dead-lettered by routing.topic_pattern, and a sixth: listed
// with their reason and the topic they were meant for, then redriven with
// a pattern that allows the five. All five land on their topic, marked
// with the redrive, read again from their rows; the sixth, still outside
// the pattern, stays with its new reason in a dead letter of its own. A
// second redrive sends none of the five again, and writes nothing for the
// sixth, whose reason has not changed.
func TestDeadLettersRedrive(t *testing.T) {
	t.Parallel()
	t.Run("cdc", func(t *testing.T) { testDeadLettersRedrive(t, false, true) })
	t.Run("cdc exactly_once", func(t *testing.T) {
		testDeadLettersRedrive(t, false, true, "OUTBOXRELAY_KAFKA_DELIVERY=exactly_once")
	})
	t.Run("poll dead letter topic", func(t *testing.T) { testDeadLettersRedrive(t, true, true) })
	// Without a dead letter topic the poller moves the rows into its
	// dead-letter table after poll.max_attempts; the redrive reads them
	// there and deletes those Kafka now has.
	t.Run("poll dead-letter table", func(t *testing.T) { testDeadLettersRedrive(t, true, false) })
}

func testDeadLettersRedrive(t *testing.T, poll, topic bool, env ...string) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	extra := cdcYAML(name)
	if poll {
		applyBinaryPollDDL(t, url)
		extra = "source: poll\npoll:\n  interval: 100ms\n"
	}
	extra += "routing:\n  topic_pattern: 'outbox\\.event\\.order'\n"
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, extra))
	if topic {
		env = append([]string{"OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC=outbox.deadletter"}, env...)
	}
	startBinary(t, []string{"run", "--config", cfg}, env...)
	if !poll {
		waitSlotActive(ctx, t, pool, name)
	}
	var invoices []string
	for i := range 5 {
		invoices = append(invoices, insertEvent(ctx, t, pool, "invoice", fmt.Sprintf("inv-%d", i), i+1))
	}
	payment := insertEvent(ctx, t, pool, "payment", "pay-1", 1)
	insertEvent(ctx, t, pool, "order", "ord-1", 1)
	waitDeadLettered(ctx, t, pool, brokers, topic, append([]string{payment}, invoices...))

	dead := func(args ...string) string {
		t.Helper()
		out, err := replayCommand(t, env, append([]string{"dead-letters", "--config", cfg}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dead-letters %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	list := dead("list")
	t.Logf("dead-letters list:\n%s", list)
	for _, id := range append(invoices, payment) {
		if !strings.Contains(list, id) {
			t.Errorf("the list does not name dead-lettered event %s:\n%s", id, list)
		}
	}
	for _, want := range []string{"outbox.event.invoice", "outside routing.topic_pattern", "6 dead letters"} {
		if !strings.Contains(list, want) {
			t.Errorf("the list does not say %q:\n%s", want, list)
		}
	}
	if show := dead("show", invoices[0]); !strings.Contains(show, "outside routing.topic_pattern") || !strings.Contains(show, "redrive --id "+invoices[0]) {
		t.Errorf("show does not give the reason and the redrive command:\n%s", show)
	}

	// The routing fixed for invoices; the relay need not restart for it.
	fixed := append(append([]string{}, env...), `OUTBOXRELAY_ROUTING_TOPIC_PATTERN=outbox\.event\.(order|invoice)`)
	redrive := func() string {
		t.Helper()
		out, err := replayCommand(t, fixed, "dead-letters", "--config", cfg, "redrive").CombinedOutput()
		if err != nil {
			t.Fatalf("redrive: %v\n%s", err, out)
		}
		return string(out)
	}
	out := redrive()
	t.Logf("dead-letters redrive:\n%s", lastLines(out, 3))
	if !strings.Contains(out, "5 went to their topics, 1 stayed (1 of them with a new reason)") {
		t.Errorf("the first redrive does not say 5 went and 1 stayed:\n%s", out)
	}
	if out := redrive(); !strings.Contains(out, "0 went to their topics, 1 stayed (0 of them with a new reason)") {
		t.Errorf("the second redrive does not say none went:\n%s", out)
	}
	checkRedriven(ctx, t, pool, brokers, topic, invoices, payment)
	if list := dead("list"); !strings.Contains(list, "1 dead letters") || !strings.Contains(list, payment) {
		t.Errorf("after the redrives the list does not hold the one that stayed alone:\n%s", list)
	}
}

// waitDeadLettered waits until every event of ids is dead-lettered: on
// the dead letter topic, or in the poller's dead-letter table.
func waitDeadLettered(ctx context.Context, t *testing.T, pool *pgxpool.Pool, brokers []string, topic bool, ids []string) {
	t.Helper()
	if topic {
		want := map[string]row{}
		for _, id := range ids {
			want[id] = row{}
		}
		newCollector(t, brokers, "outbox.deadletter").waitFor(t, want, time.Minute)
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_dead_letter WHERE event_id = ANY($1)`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events in the dead-letter table after 2 minutes", n, len(ids))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkRedriven checks where the redrives left the events: each invoice
// once on its topic, marked; the payment dead-lettered once more, with the
// new pattern in its reason, by the first redrive only (a new record on
// the topic, or its row's reason in the table).
func checkRedriven(ctx context.Context, t *testing.T, pool *pgxpool.Pool, brokers []string, topic bool, invoices []string, payment string) {
	t.Helper()
	c := newCollector(t, brokers, "outbox.event.invoice", "outbox.deadletter")
	want := map[string]row{}
	for _, id := range invoices {
		want[id] = row{}
	}
	c.waitFor(t, want, time.Minute)
	c.settle(time.Second)
	onTopic := map[string]int{}
	newDead := 0
	for _, r := range c.recs {
		switch {
		case r.Topic == "outbox.event.invoice":
			onTopic[header(r, "id")]++
			if header(r, "outboxrelay.redrive") == "" {
				t.Errorf("invoice %s on its topic without the redrive's header", header(r, "id"))
			}
		case header(r, "outboxrelay.redrive") != "":
			newDead++
			if header(r, "id") != payment || !strings.Contains(header(r, "outboxrelay.error"), `outbox\.event\.(order|invoice)`) {
				t.Errorf("a new dead letter for %s with reason %q; want one for %s naming the new pattern", header(r, "id"), header(r, "outboxrelay.error"), payment)
			}
		}
	}
	for _, id := range invoices {
		if onTopic[id] != 1 {
			t.Errorf("invoice %s is on its topic %d times, want once", id, onTopic[id])
		}
	}
	if topic && newDead != 1 {
		t.Errorf("%d new dead letters, want 1 (the payment's, written by the first redrive only)", newDead)
	}
	if topic {
		return
	}
	var n int
	var reason string
	if err := pool.QueryRow(ctx, `SELECT count(*), max(reason) FROM outbox_dead_letter`).Scan(&n, &reason); err != nil {
		t.Fatal(err)
	}
	if n != 1 || !strings.Contains(reason, `outbox\.event\.(order|invoice)`) {
		t.Errorf("the dead-letter table holds %d rows, the last reason %q; want the payment's alone, with the new pattern in its reason", n, reason)
	}
}

func insertEvent(ctx context.Context, t *testing.T, pool *pgxpool.Pool, aggType, aggID string, seq int) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Happened', $3) RETURNING id::text`,
		aggType, aggID, fmt.Sprintf(`{"seq": %d}`, seq)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
