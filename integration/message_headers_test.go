package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// TestMessageWithoutHeadersRelayed: with cdc.message_prefixes and
// routing.headers_column: headers, a logical decoding message whose
// content has no headers member (what outbox.Messages writes for an event
// without headers) is published without headers, as a row with a NULL
// headers column is, and the message after it, with headers, follows with
// them; the relay stays up and ready. A message whose headers are not an
// object goes to the dead letter topic, naming the member.
func TestMessageWithoutHeadersRelayed(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	const dlt = "outbox.dead-letter"
	p := runBinary(t, e.cdcConfig("  message_prefixes: [outbox]\nrouting:\n  headers_column: headers\n"),
		"OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC="+dlt)
	ep := binaryEndpoint(t, p)
	ep.waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	for _, content := range []string{
		// outbox.MessageContent of an event without headers.
		`{"id":"m1","aggregatetype":"order","aggregateid":"a","type":"Placed","payload":{"n":1}}`,
		`{"id":"m2","aggregatetype":"order","aggregateid":"a","type":"Placed","payload":{"n":2},"headers":["tenant"]}`,
		`{"id":"m3","aggregatetype":"order","aggregateid":"a","type":"Placed","payload":{"n":3},"headers":{"tenant":"acme"}}`,
		// Only the required members.
		`{"id":"m4","aggregatetype":"order","aggregateid":"a"}`,
	} {
		if _, err := e.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox', $1::text)`, content); err != nil {
			t.Fatal(err)
		}
	}
	c := newCollector(t, e.brokers, "outbox.event.order")
	c.readAtLeast(ctx, t, 3, time.Minute)
	dl := newCollector(t, e.brokers, dlt)
	dl.readAtLeast(ctx, t, 1, time.Minute)
	c.settle(300 * time.Millisecond)

	var got []string
	for _, r := range c.recs {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		got = append(got, string(r.Value)+" "+strings.Join(hs, ","))
	}
	want := []string{`{"n":1} id=m1`, `{"n":3} id=m3,tenant=acme`, ` id=m4`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records, in order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if id, reason := header(dl.recs[0], "id"), header(dl.recs[0], connector.HeaderError); id != "m2" || !strings.Contains(reason, `"headers" must be an object of strings`) {
		t.Errorf("dead letter record of %q, reason %q; want m2's, naming its headers", id, reason)
	}
	if p.cmd.ProcessState != nil {
		t.Fatalf("the relay exited:\n%s", p.out.String())
	}
	ep.waitStatus(t, "/readyz", http.StatusOK, 10*time.Second)
}
