package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// emitSQL writes one outbox event as a transactional logical decoding
// message, in the content's format (docs/outbox-messages.md).
func emitSQL(prefix, id, aggID string, seq int) string {
	return fmt.Sprintf(`SELECT pg_logical_emit_message(true, '%s', '{"id": "%s", "aggregatetype": "order", "aggregateid": "%s", "type": "Msg", "payload": {"seq": %d}, "headers": {"tenant": "t1"}}')`,
		prefix, id, aggID, seq)
}

// TestCDCLogicalMessagesInCommitOrder: events written as logical decoding
// messages with a configured prefix arrive with the table's events, in
// commit order, the events of one transaction in the order they were
// written; messages of other prefixes, non-transactional ones and those
// of a transaction that rolled back are not events; a message whose
// content is not an event goes to the dead letter topic naming the
// message and the problem, and the events after it still arrive. The
// relay's own heartbeat messages, sent now too, are not events.
func TestCDCLogicalMessagesInCommitOrder(t *testing.T) {
	e := newEnv(t, cdcKind)
	ctx := context.Background()
	src := openCDC(t, cdc.Config{URL: e.url, Table: "public.outbox", Slot: e.name, Publication: e.name,
		MessagePrefixes: []string{"outbox", "outbox-b"}, HeartbeatInterval: 100 * time.Millisecond})
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{DeadLetterTopic: "dlq"}, sink.Config{})
	waitSlotActive(ctx, t, e.pool, e.name)

	row := func(id string, seq int) string {
		return fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', 'order', 'a', 'Row', '{"seq": %d}')`, id, seq)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const (
		u1 = "00000000-0000-0000-0000-000000000001"
		u3 = "00000000-0000-0000-0000-000000000003"
		u6 = "00000000-0000-0000-0000-000000000006"
	)
	// One transaction: row, message, row, message of the second prefix.
	exec(`BEGIN; ` + row(u1, 1) + `; ` + emitSQL("outbox", "m2", "a", 2) + `; ` + row(u3, 3) + `; ` + emitSQL("outbox-b", "m4", "a", 4) + `; COMMIT`)
	// Not events: another prefix, a non-transactional message, a
	// transaction that rolled back.
	exec(emitSQL("someone-else", "x1", "a", 100))
	exec(`SELECT pg_logical_emit_message(false, 'outbox', '{"id": "x2", "aggregatetype": "order", "aggregateid": "a", "payload": 101}')`)
	exec(`BEGIN; ` + emitSQL("outbox", "x3", "a", 102) + `; ROLLBACK`)
	// A message alone, then a bad one between two good events.
	exec(emitSQL("outbox", "m5", "a", 5))
	exec(`BEGIN; SELECT pg_logical_emit_message(true, 'outbox', 'not json'); ` + row(u6, 6) + `; ` + emitSQL("outbox", "m7", "a", 7) + `; COMMIT`)

	c := newCollector(t, e.brokers, "outbox.event.order")
	c.readAtLeast(ctx, t, 7, 60*time.Second)
	dl := newCollector(t, e.brokers, "dlq")
	dl.readAtLeast(ctx, t, 1, 60*time.Second)
	r.stop(t)
	c.settle(300 * time.Millisecond)

	var got []string
	for _, rec := range c.recs {
		got = append(got, fmt.Sprintf("%s %s %s", header(rec, "id"), rec.Key, rec.Value))
	}
	want := []string{
		u1 + ` a {"seq": 1}`,
		`m2 a {"seq": 2}`,
		u3 + ` a {"seq": 3}`,
		`m4 a {"seq": 4}`,
		`m5 a {"seq": 5}`,
		u6 + ` a {"seq": 6}`,
		`m7 a {"seq": 7}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records, in order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, rec := range c.recs[:2] {
		if rec.Partition != c.recs[0].Partition {
			t.Errorf("aggregate a's events are on partitions %d and %d", c.recs[0].Partition, rec.Partition)
		}
	}
	bad := dl.recs[0]
	if cause := header(bad, "outboxrelay.error"); !strings.Contains(cause, `message "outbox"`) || !strings.Contains(cause, "not a JSON object") {
		t.Errorf("dead letter's error header %q does not name the message and the problem", cause)
	}
	if string(bad.Value) != "not json" {
		t.Errorf("dead letter's value %q, want the message's content", bad.Value)
	}
	// The non-transactional message is counted as skipped.
	if n := src.SkippedChanges(); n != 1 {
		t.Errorf("skipped %d changes, want 1 (the non-transactional message)", n)
	}
}
