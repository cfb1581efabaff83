package integration

import (
	"context"

	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
)

// avroEnv is the configuration of a relay writing keys and values as
// Avro through reg, with the password from a file.
func avroEnv(t *testing.T, dbURL, name string, brokers []string, reg *testenv.Registry) map[string]string {
	pw := filepath.Join(t.TempDir(), "registry-password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"postgres.url":                    dbURL,
		"outbox.table":                    "public.outbox",
		"cdc.slot":                        name,
		"cdc.publication":                 name,
		"cdc.status_interval":             "100ms",
		"kafka.brokers":                   strings.Join(brokers, ","),
		"http.listen":                     "127.0.0.1:0",
		"routing.key_format":              "avro",
		"routing.value_format":            "avro",
		"schema_registry.url":             reg.URL,
		"schema_registry.username":        "relay",
		"schema_registry.password_file":   pw,
		"schema_registry.request_timeout": "2s",
	}
}

// avroText decodes a Confluent wire format record whose schema is a
// string, or a union of null and a string, with the schema the registry
// holds under its id.
func avroText(t *testing.T, reg *testenv.Registry, b []byte) (string, bool) {
	t.Helper()
	if len(b) < 5 || b[0] != 0 {
		t.Errorf("not the Confluent wire format (magic byte 0, 4-byte schema id): %x", b)
		return "", false
	}
	id := int(uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4]))
	text, ok := reg.Schema(id)
	if !ok {
		t.Errorf("schema id %d is not in the registry", id)
		return "", false
	}
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		t.Errorf("schema %d: %v", id, err)
		return "", false
	}
	var v any
	if err := avro.Unmarshal(s, b[5:], &v); err != nil {
		t.Errorf("decode with schema %d: %v", id, err)
		return "", false
	}
	str, ok := v.(string)
	if !ok {
		t.Errorf("schema %d decodes to a %T, not a string", id, v)
	}
	return str, ok
}

// TestAvroRegistryOutage, for each source, stops the Schema Registry for 10 s while events
// of a new aggregate type, whose topic's subjects have no schema yet, are
// committed beside events of one whose schemas are known. The user sees:
// a WARN saying the registry is unreachable and publishing waits, /readyz
// failing on schema_registry, /healthz passing (a restart would not help),
// outboxrelay_schema_registry_up at 0; nothing
// of the new type in Kafka meanwhile; then, once it is back, every event,
// once each, each aggregate's in commit order, every key and value
// decoding with its registered schema to the row's, and the probe and
// metric well again.
func TestAvroRegistryOutage(t *testing.T) {
	t.Parallel()
	for _, source := range []string{"cdc", "poll"} {
		t.Run(source, func(t *testing.T) {
			t.Parallel()
			testAvroRegistryOutage(t, source)
		})
	}
}

func testAvroRegistryOutage(t *testing.T, source string) {
	ctx := context.Background()
	dbURL := testenv.Postgres(t)
	pool := connectPool(t, dbURL)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	reg := testenv.StartRegistry(t, "relay", "s3cret")
	env := avroEnv(t, dbURL, uniqueName(t), brokers, reg)
	if source == "poll" {
		execSQL(t, dbURL, poller.DDL(poller.Config{URL: dbURL, Table: "public.outbox"}))
		env["source"], env["poll.interval"], env["poll.max_interval"], env["poll.batch_size"] = "poll", "50ms", "200ms", "200"
	}
	// Short stall bounds, so that the outage outlasts them: readiness
	// fails, liveness does not ask for a restart that would not help.
	env["http.ready_stall_timeout"], env["http.live_stall_timeout"] = "2s", "3s"
	a := startApp(t, env)

	// The order topic's schemas are registered while the registry is up.
	c := newCollector(t, brokers, "outbox.event.order", "outbox.event.invoice")
	workload{table: "outbox", aggType: "order", writers: 2, aggregates: 10, events: 200}.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)

	reg.Stop()
	stopped := time.Now()
	orders := workload{table: "outbox", aggType: "order", writers: 2, aggregates: 10, events: 400, seqBase: 20}.writeInBackground(ctx, t, pool)
	invoices := workload{table: "outbox", aggType: "invoice", writers: 2, aggregates: 10, events: 400}.writeInBackground(ctx, t, pool)
	<-orders
	<-invoices

	w := waitWarn(t, a, "schema registry unreachable", 30*time.Second)
	if w["subject"] != "outbox.event.invoice-key" && w["subject"] != "outbox.event.invoice-value" {
		t.Errorf("the warning names subject %v, want one of the invoice topic's", w["subject"])
	}
	a.waitStatus(t, "/readyz", http.StatusServiceUnavailable, 30*time.Second, "schema_registry", "has not answered")
	a.waitMetric(t, "outboxrelay_schema_registry_up", 30*time.Second, "0 while the registry is down", func(v float64) bool { return v == 0 })
	time.Sleep(time.Until(stopped.Add(10 * time.Second)))
	// Liveness passes: where the progress check sees the stall (cdc), it
	// says the relay waits for the registry instead of failing.
	if code, body := a.get(t, "/healthz"); code != http.StatusOK || (strings.Contains(body, "stalled") && !strings.Contains(body, "waiting for the schema registry")) {
		t.Errorf("/healthz after 10 s of waiting for the registry: %d\n%s\nwant 200, and any stall put down to the registry", code, body)
	} else if source == "cdc" && !strings.Contains(body, "waiting for the schema registry") {
		t.Errorf("/healthz does not say the relay waits for the registry:\n%s", body)
	}
	c.settle(200 * time.Millisecond)
	for _, r := range c.recs {
		if r.Topic == "outbox.event.invoice" {
			t.Fatalf("an invoice record (event %s) reached Kafka while its schema could not be registered", header(r, "id"))
		}
	}
	reg.Start(t)

	rows := readRows(ctx, t, pool, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	c.settle(500 * time.Millisecond)
	a.waitStatus(t, "/readyz", http.StatusOK, time.Minute)
	a.waitMetric(t, "outboxrelay_schema_registry_up", 10*time.Second, "1 once the registry answers", func(v float64) bool { return v == 1 })
	if n := a.metric(t, "outboxrelay_schema_registry_errors_total"); n < 1 {
		t.Errorf("outboxrelay_schema_registry_errors_total = %v, want the failed requests counted", n)
	}
	if !strings.Contains(a.logs.String(), "schema registry answers again") {
		t.Errorf("the relay did not say the registry was back")
	}

	// Every event once, in commit order per aggregate, decoding to its row.
	seen := map[string]bool{}
	last := map[string]int{}
	for _, r := range c.recs {
		id := header(r, "id")
		want, ok := rows[id]
		if !ok {
			t.Errorf("record %s/%d@%d has id %q, which is no outbox row", r.Topic, r.Partition, r.Offset, id)
			continue
		}
		if seen[id] {
			t.Errorf("event %s published twice; a registry outage pauses publishing, it does not restart it", id)
			continue
		}
		seen[id] = true
		if r.Topic != "outbox.event."+want.aggType {
			t.Errorf("event %s: topic %q", id, r.Topic)
		}
		if k, ok := avroText(t, reg, r.Key); ok && k != want.aggID {
			t.Errorf("event %s: key decodes to %q, want %q", id, k, want.aggID)
		}
		if v, ok := avroText(t, reg, r.Value); ok && v != want.payload {
			t.Errorf("event %s: value decodes to %q, want %q", id, v, want.payload)
		}
		seq := payloadSeq(t, want.payload)
		agg := want.aggType + "/" + want.aggID
		if prev := last[agg]; seq != prev+1 {
			t.Errorf("aggregate %s: event %d follows event %d (out of commit order or missing)", agg, seq, prev)
		}
		last[agg] = seq
	}
	if len(seen) != len(rows) {
		t.Errorf("%d of %d events reached Kafka", len(seen), len(rows))
	}
	subjects := reg.Subjects()
	for _, s := range []string{"outbox.event.order-key", "outbox.event.order-value", "outbox.event.invoice-key", "outbox.event.invoice-value"} {
		if len(subjects[s]) != 1 {
			t.Errorf("subject %s has %d versions, want 1; subjects: %v", s, len(subjects[s]), subjects)
		}
	}
}

// preRegister registers schema under subject, as an earlier producer did.
func preRegister(t *testing.T, reg *testenv.Registry, subject, schema string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": schema})
	req, _ := http.NewRequest(http.MethodPost, reg.URL+"/subjects/"+subject+"/versions", strings.NewReader(string(body)))
	req.SetBasicAuth("relay", "s3cret")
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pre-register %s: HTTP %d", subject, resp.StatusCode)
	}
}

// TestAvroIncompatibleSchema has the registry refuse the value schema of
// one topic as incompatible (409). Without a dead letter topic the relay
// stops with an error naming the event, the subject and the registry's
// message; with one, the event goes there with that error in a header,
// and the events of other topics go on in Avro.
func TestAvroIncompatibleSchema(t *testing.T) {
	t.Parallel()
	const details = "{errorType:'TYPE_MISMATCH', description:'The type (path '/') of a field in the new schema does not match with the old schema'}"
	for _, dlt := range []string{"", "outbox.dead"} {
		name := "stops"
		if dlt != "" {
			name = "dead letter topic"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dbURL := testenv.Postgres(t)
			pool := connectPool(t, dbURL)
			createOutbox(t, pool, "outbox")
			_, brokers := testenv.Kafka(t)
			reg := testenv.StartRegistry(t, "relay", "s3cret")
			preRegister(t, reg, "outbox.event.order-value", `{"type":"long"}`)
			reg.Reject("outbox.event.order-value", details)
			env := avroEnv(t, dbURL, uniqueName(t), brokers, reg)
			if dlt != "" {
				env["kafka.dead_letter_topic"] = dlt
			}
			a := startApp(t, env)
			const bad = "11111111-1111-1111-1111-111111111111"
			const good = "22222222-2222-2222-2222-222222222222"
			for _, sql := range []string{
				`INSERT INTO public.outbox VALUES ('` + bad + `', 'order', 'o-1', 'OrderCreated', '{"n": 1}')`,
				`INSERT INTO public.outbox VALUES ('` + good + `', 'invoice', 'i-1', 'InvoiceCreated', '{"n": 2}')`,
			} {
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			wantErr := []string{bad, `"outbox.event.order-value"`, "incompatible", "409", "Schema being registered is incompatible with an earlier schema", "TYPE_MISMATCH"}

			if dlt == "" {
				select {
				case err := <-a.done:
					a.done = nil
					if err == nil {
						t.Fatal("the relay stopped with exit 0, want exit 1 naming the event")
					}
					for _, s := range wantErr {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("the error does not say %q: %v", s, err)
						}
					}
				case <-time.After(time.Minute):
					t.Fatal("the relay did not stop on a schema the registry refused")
				}
				if got := reg.Subjects()["outbox.event.order-value"]; len(got) != 1 {
					t.Errorf("the refused schema was registered: %v", got)
				}
				return
			}

			c := newCollector(t, brokers, dlt, "outbox.event.invoice")
			c.waitFor(t, map[string]row{bad: {}, good: {}}, time.Minute)
			c.settle(300 * time.Millisecond)
			if len(c.recs) != 2 {
				t.Errorf("%d records, want the dead letter and the invoice", len(c.recs))
			}
			for _, r := range c.recs {
				switch header(r, "id") {
				case bad:
					if r.Topic != dlt {
						t.Errorf("the refused event went to %s, want %s", r.Topic, dlt)
					}
					for _, s := range wantErr[1:] {
						if !strings.Contains(header(r, connector.HeaderError), s) {
							t.Errorf("the dead letter's %s header does not say %q: %s", connector.HeaderError, s, header(r, connector.HeaderError))
						}
					}
					if header(r, connector.HeaderOriginalTopic) != "outbox.event.order" {
						t.Errorf("the dead letter's %s header is %q", connector.HeaderOriginalTopic, header(r, connector.HeaderOriginalTopic))
					}
					if string(r.Value) != `{"n": 1}` {
						t.Errorf("the dead letter's value is %q, want the payload as stored", r.Value)
					}
				case good:
					if r.Topic != "outbox.event.invoice" {
						t.Errorf("the invoice went to %s", r.Topic)
					}
					if v, ok := avroText(t, reg, r.Value); ok && v != `{"n": 2}` {
						t.Errorf("the invoice's value decodes to %q", v)
					}
				}
			}
			if n := a.metric(t, "outboxrelay_dead_lettered_events_total"); n != 1 {
				t.Errorf("outboxrelay_dead_lettered_events_total = %v, want 1", n)
			}
		})
	}
}
