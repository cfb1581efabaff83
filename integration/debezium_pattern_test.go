package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// patternConnector is the outbox example's connector with
// table.include.list the pattern Debezium configs mostly use, in
// publication.autocreate.mode mode, with publication pub.
func patternConnector(pgURL, slot, pub, mode string) string {
	c := exampleConnector(pgURL, slot, `,
    "publication.name": "`+pub+`",
    "publication.autocreate.mode": "`+mode+`"`)
	return strings.Replace(c, `"table.include.list" : "inventory.outboxevent"`, `"table.include.list" : "inventory\\.outbox.*"`, 1)
}

func insertInto(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table, id, aggType string, seq int) {
	t.Helper()
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2, '3', 'Created', '2019-05-03 13:31:34.484', jsonb_build_object('seq', $3::int))`, id, aggType, seq)
	if err != nil {
		t.Fatal(err)
	}
}

// TestDebeziumTablePattern: table.include.list inventory\.outbox.*, as
// Debezium matches it (the whole schema.table, ignoring case:
// Selectors.TableSelectionPredicateBuilder, Predicates.includes,
// PostgresConnectorConfig's schema.table mapper), with the publication
// outboxrelay creates (filtered). `debezium translate` lists the table the
// pattern matches now; the relay relays it; a matching table created while
// the relay runs joins the publication and its event arrives, routed as
// the first table's (topic <aggregatetype>.events, the eventType header);
// a table that does not match stays out.
func TestDebeziumTablePattern(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pgURL := testenv.Postgres(t)
	pool := connectPool(t, pgURL)
	if _, err := pool.Exec(ctx, outboxEventDDL); err != nil {
		t.Fatal(err)
	}
	slot := uniqueName(t)
	_, brokers := testenv.Kafka(t)
	content := patternConnector(pgURL, slot, slot+"_pub", "filtered")
	file := writeTemp(t, "c.json", content)

	out, code := runCommand(t, nil, "debezium", "translate", file)
	if code != 0 || !strings.Contains(out, `table_patterns: [inventory\.outbox.*]`) ||
		!strings.Contains(out, `inventory\.outbox.* match these tables now: inventory.outboxevent`) {
		t.Errorf("debezium translate (exit %d) does not show the pattern and the table it matches now:\n%s", code, out)
	}

	p := startBinary(t, []string{"run", "--debezium-config", file},
		"OUTBOXRELAY_HTTP_LISTEN=127.0.0.1:0", "OUTBOXRELAY_LOG_FORMAT=text", "OUTBOXRELAY_CDC_STATUS_INTERVAL=200ms",
		"OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	waitSlotActive(ctx, t, pool, slot)
	first := "00000000-0000-4000-8000-000000000001"
	insertInto(ctx, t, pool, "inventory.outboxevent", first, "Order", 1)

	for _, ddl := range []string{
		`CREATE TABLE inventory.outbox_invoices (LIKE inventory.outboxevent INCLUDING ALL)`,
		`CREATE TABLE inventory.audit (LIKE inventory.outboxevent INCLUDING ALL)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var in bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND tablename = 'outbox_invoices')`, slot+"_pub").Scan(&in); err != nil {
			t.Fatal(err)
		}
		if in {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new table inventory.outbox_invoices, which matches the pattern, did not join the publication in 90 s:\n%s", lastLines(p.out.String(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	invoice := "00000000-0000-4000-8000-000000000002"
	insertInto(ctx, t, pool, "inventory.outbox_invoices", invoice, "Invoice", 2)
	insertInto(ctx, t, pool, "inventory.audit", "00000000-0000-4000-8000-000000000003", "Audit", 3)
	// The audit row, if it were relayed, would come before this one.
	last := "00000000-0000-4000-8000-000000000004"
	insertInto(ctx, t, pool, "inventory.outboxevent", last, "Order", 4)

	recs := testenv.Consume(ctx, t, brokers, []string{"Order.events", "Invoice.events", "Audit.events"}, 3)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d", code)
	}
	want := map[string]string{first: "Order.events", invoice: "Invoice.events", last: "Order.events"}
	for _, r := range recs {
		id := header(r, "id")
		topic, ok := want[id]
		if !ok {
			t.Errorf("unexpected record %s on %s", id, r.Topic)
			continue
		}
		delete(want, id)
		if r.Topic != topic || header(r, "eventType") != "Created" {
			t.Errorf("record %s on %s with eventType %q, want %s and Created", id, r.Topic, header(r, "eventType"), topic)
		}
	}
	for id := range want {
		t.Errorf("event %s never reached Kafka", id)
	}
	if log := p.out.String(); !strings.Contains(log, "added a new table that matches outbox.table_patterns to the publication") {
		t.Errorf("the relay did not say it added the new table:\n%s", lastLines(log, 20))
	}
}

// TestDebeziumTablePatternAllTables: with Debezium's own publication, FOR
// ALL TABLES (publication.autocreate.mode all_tables), a table is in it
// from its creation: a row inserted in the very transaction that creates
// a matching table arrives, with no gap.
func TestDebeziumTablePatternAllTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	_, brokers := testenv.Kafka(t)
	p := runDebeziumBinary(t, "c.json", patternConnector(pgURL, slot, "dbz_publication", "all_tables"),
		"OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	waitSlotActive(ctx, t, pool, slot)
	id := "00000000-0000-4000-8000-000000000005"
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`CREATE TABLE inventory.outbox_refunds (LIKE inventory.outboxevent INCLUDING ALL)`,
		`INSERT INTO inventory.outbox_refunds VALUES ('` + id + `', 'Refund', '3', 'Created', '2019-05-03 13:31:34.484', '{"seq": 5}')`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	recs := testenv.Consume(ctx, t, brokers, []string{"Refund.events"}, 1)
	if got := header(recs[0], "id"); got != id {
		t.Errorf("record id %q, want %q", got, id)
	}
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d", code)
	}
	if log := p.out.String(); !strings.Contains(log, "relaying a new table that matches outbox.table_patterns") {
		t.Errorf("the relay did not say it took up the new table:\n%s", lastLines(log, 20))
	}
}
