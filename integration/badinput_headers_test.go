package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestBadInputHeadersColumn: with routing.headers_column, a row whose
// column is not a JSON object, or is over 64 KiB, goes to the dead letter
// topic with a reason naming the column and the problem; the rows around
// it, an object and a NULL, flow with their headers.
func TestBadInputHeadersColumn(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	name := uniqueName(t)
	createOutbox(t, pool, name)
	if _, err := pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN meta jsonb`, tableIdent(name))); err != nil {
		t.Fatal(err)
	}
	_, brokers := testenv.Kafka(t)
	const dlt = "outbox.dead-letter"
	cfg := yamlConfig(url, brokers, fmt.Sprintf("outbox:\n  table: %s\ncdc:\n  slot: %s\n  publication: %s\nrouting:\n  headers_column: meta\n", name, name, name))
	p := runBinary(t, cfg, "OUTBOXRELAY_KAFKA_DEAD_LETTER_TOPIC="+dlt)
	binaryEndpoint(t, p).waitStatus(t, "/readyz", http.StatusOK, time.Minute)

	huge := `{"a": "` + strings.Repeat("x", connector.MaxHeadersColumn) + `"}`
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregateid, aggregatetype, type, payload, meta) VALUES
		('good', 'order', 'created', '{}', '{"tenant": "acme", "n": 1}'),
		('array', 'order', 'created', '{}', '["tenant"]'),
		('null', 'order', 'created', '{}', NULL),
		('huge', 'order', 'created', '{}', $1::jsonb)`, tableIdent(name)), huge); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recs := testenv.Consume(wctx, t, brokers, []string{"outbox.event.order", dlt}, 4)
	byKey := map[string]*kgo.Record{}
	for _, r := range recs {
		byKey[r.Topic+"/"+string(r.Key)] = r
	}
	if r := byKey["outbox.event.order/good"]; r == nil || header(r, "tenant") != "acme" || header(r, "n") != "1" {
		t.Errorf("the row with a headers object: %v, want headers tenant=acme and n=1", r)
	}
	if r := byKey["outbox.event.order/null"]; r == nil || len(r.Headers) != 1 {
		t.Errorf("the row with a NULL headers column: %v, want its id header alone", r)
	}
	for key, want := range map[string]string{"array": `headers are not a JSON object but "[\"tenant\"]"`, "huge": "over the 65536 the relay takes"} {
		r := byKey[dlt+"/"+key]
		if r == nil {
			t.Errorf("the %s row is not on the dead letter topic", key)
			continue
		}
		reason := header(r, connector.HeaderError)
		for _, s := range []string{`column "meta" (routing.headers_column)`, want} {
			if !strings.Contains(reason, s) {
				t.Errorf("the %s row's dead letter reason %q does not say %q", key, reason, s)
			}
		}
	}
}
