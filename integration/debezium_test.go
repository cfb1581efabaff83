package integration

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The table of Debezium's outbox example (debezium-examples, outbox/).
const outboxEventDDL = `CREATE SCHEMA inventory;
CREATE TABLE inventory.outboxevent (
	id            uuid NOT NULL PRIMARY KEY,
	aggregatetype varchar(255) NOT NULL,
	aggregateid   varchar(255) NOT NULL,
	type          varchar(255) NOT NULL,
	timestamp     timestamp NOT NULL,
	payload       jsonb
)`

// exampleConnector is the example's register-postgres.json with the
// connection filled in, plugin.name pgoutput (the example's image has
// decoderbufs) and the test's slot; extra options go at the end.
func exampleConnector(pgURL, slot, extra string) string {
	u, _ := url.Parse(pgURL)
	return fmt.Sprintf(`{
    "name": "outbox-connector",
    "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "database.hostname": %q,
    "database.port": %q,
    "database.user": %q,
    "database.password": "not-checked",
    "database.dbname" : %q,
    "database.sslmode": "disable",
    "topic.prefix": "dbserver1",
    "plugin.name": "pgoutput",
    "slot.name": %q,
    "schema.include.list": "inventory",
    "table.include.list" : "inventory.outboxevent",
    "tombstones.on.delete" : "false",
    "transforms" : "outbox",
    "transforms.outbox.type" : "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.route.topic.replacement" : "${routedByValue}.events",
    "transforms.outbox.table.field.event.timestamp" : "timestamp",
    "transforms.outbox.table.fields.additional.placement" : "type:header:eventType"%s
    }
}`, u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"), slot, extra)
}

// runDebeziumBinary starts `outboxrelay run --debezium-config FILE`.
func runDebeziumBinary(t *testing.T, file, content string, env ...string) *proc {
	t.Helper()
	return startBinary(t, []string{"run", "--debezium-config", writeTemp(t, file, content)},
		append([]string{"OUTBOXRELAY_HTTP_LISTEN=127.0.0.1:0", "OUTBOXRELAY_LOG_FORMAT=text", "OUTBOXRELAY_CDC_STATUS_INTERVAL=200ms"}, env...)...)
}

// debeziumSlot creates the slot and publication as Debezium's connector
// does (pgoutput; publication.autocreate.mode=all_tables).
func debeziumSlot(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	for _, sql := range []string{"CREATE PUBLICATION dbz_publication FOR ALL TABLES",
		"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')"} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// debeziumDatabase is a new database with the example's outbox table made
// by ddl (outboxEventDDL, or a variant of it), and the slot and
// publication as Debezium makes them; it returns the database's URL, a
// pool on it and the slot's name.
func debeziumDatabase(ctx context.Context, t *testing.T, ddl string) (string, *pgxpool.Pool, string) {
	t.Helper()
	pgURL := testenv.Postgres(t)
	pool := connectPool(t, pgURL)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	slot := uniqueName(t)
	debeziumSlot(ctx, t, pool, slot)
	return pgURL, pool, slot
}

func insertOutboxEvent(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int) string {
	t.Helper()
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	_, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, 'Order', $2, 'OrderCreated', '2019-05-03 13:31:34.484', $3)`,
		id, fmt.Sprint(n%5), fmt.Sprintf(`{"seq": %d}`, n))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDebeziumTakeover stands in for a Debezium connector that read part
// of the stream from its slot: the changes up to a position are consumed
// through the slot by SQL, which confirms them as Debezium's
// acknowledgements do. outboxrelay, started with the connector's JSON,
// must publish exactly the events after that position: none lost, none of
// the consumed ones again.
func TestDebeziumTakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)

	var ids []string
	for i := range 30 {
		ids = append(ids, insertOutboxEvent(ctx, t, pool, i))
	}
	var upto string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&upto); err != nil {
		t.Fatal(err)
	}
	for i := 30; i < 45; i++ {
		ids = append(ids, insertOutboxEvent(ctx, t, pool, i))
	}
	// "Debezium" reads the stream up to the 30th commit and acknowledges
	// it; the 15 commits after upto stay in the slot.
	// The test server commits asynchronously, and logical decoding reads
	// only flushed WAL; the WAL writer flushes within wal_writer_delay.
	for flushed := false; !flushed; time.Sleep(20 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, upto).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
	}
	var consumed int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_get_binary_changes($1, $2::pg_lsn, NULL,
		'proto_version', '1', 'publication_names', 'dbz_publication') WHERE get_byte(data, 0) = 73`, slot, upto).Scan(&consumed)
	if err != nil {
		t.Fatal(err)
	}
	if consumed != 30 {
		t.Fatalf("consumed %d inserts through the slot, want the 30 committed before %s", consumed, upto)
	}
	var confirmed string
	if err := pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	t.Logf("slot %s confirmed at %s after consuming up to %s", slot, confirmed, upto)

	_, brokers := testenv.Kafka(t)
	p := runDebeziumBinary(t, "register-postgres.json", exampleConnector(pgURL, slot, ""), "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 15)
	// Events committed while it runs are relayed too.
	for i := 45; i < 50; i++ {
		ids = append(ids, insertOutboxEvent(ctx, t, pool, i))
	}
	recs := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 20)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d", code)
	}
	// Nothing more arrives after the stop: exactly 20 records. (Counted by
	// the partitions' end offsets, which a consumer reading for a fixed
	// while could fall short of on a loaded machine.)
	if n := topicRecords(ctx, t, brokers, "Order.events"); n != 20 {
		t.Errorf("the topic holds %d records after the stop, want 20", n)
	}

	var got []string
	for _, r := range recs {
		got = append(got, header(r, "id"))
	}
	slices.Sort(got)
	want := slices.Clone(ids[30:])
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("published events %v\nwant exactly the unconsumed %v", got, want)
	}
	// The records are Debezium's, with the worker's JsonConverter.
	r := recs[0]
	n := 0
	fmt.Sscanf(header(r, "id")[len(header(r, "id"))-12:], "%d", &n)
	wantKey := fmt.Sprintf(`{"schema":{"type":"string","optional":false},"payload":"%d"}`, n%5)
	wantValue := fmt.Sprintf(`{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"seq\": %d}"}`, n)
	if string(r.Key) != wantKey || string(r.Value) != wantValue || header(r, "eventType") != "OrderCreated" ||
		r.Timestamp.UnixMilli() != 1556890294484 || r.Partition != javaPartition(r.Key, partitions) {
		t.Errorf("record %s/%d key %s value %s eventType %q ts %d\nwant key %s value %s eventType OrderCreated ts 1556890294484 partition %d",
			r.Topic, r.Partition, r.Key, r.Value, header(r, "eventType"), r.Timestamp.UnixMilli(), wantKey, wantValue, javaPartition(r.Key, partitions))
	}
}

// TestDebeziumConverters runs the binary with --debezium-config for each
// converter setting and compares one record byte for byte with what
// Kafka Connect writes for Debezium's record.
func TestDebeziumConverters(t *testing.T) {
	const id = "00000000-0000-4000-8000-000000000007"
	for _, tc := range []struct {
		name, file, extra string
		server            bool
		key, value        string
		idHeader          string
	}{
		{name: "JsonConverter schemas.enable=false", file: "c.json",
			extra: `, "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false",
			"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false"`,
			key: `"2"`, value: `"{\"seq\": 7}"`, idHeader: id},
		{name: "JsonConverter schemas.enable=false, expanded", file: "c.json",
			extra: `, "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false",
			"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
			"transforms.outbox.table.expand.json.payload": "true"`,
			key: `"2"`, value: `{"seq":7}`, idHeader: id},
		{name: "JsonConverter schemas.enable=true, expanded", file: "c.json",
			extra: `, "transforms.outbox.table.expand.json.payload": "true"`,
			key:   `{"schema":{"type":"string","optional":false},"payload":"2"}`,
			value: `{"schema":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"seq"}],"optional":true,"name":"payload"},"payload":{"seq":7}}`, idHeader: id},
		{name: "StringConverter", file: "c.json",
			extra: `, "key.converter": "org.apache.kafka.connect.storage.StringConverter",
			"value.converter": "org.apache.kafka.connect.storage.StringConverter"`,
			key: `2`, value: `{"seq": 7}`, idHeader: id},
		// Debezium's pass-through converter hands what is not bytes to its
		// delegate.converter.type: the varchar key to StringConverter, the
		// jsonb payload to JsonConverter, configured by the options under it.
		{name: "BinaryDataConverter delegating", file: "c.json",
			extra: `, "key.converter": "io.debezium.converters.BinaryDataConverter",
			"key.converter.delegate.converter.type": "org.apache.kafka.connect.storage.StringConverter",
			"value.converter": "io.debezium.converters.BinaryDataConverter",
			"value.converter.delegate.converter.type": "org.apache.kafka.connect.json.JsonConverter",
			"value.converter.delegate.converter.type.schemas.enable": "false"`,
			key: `2`, value: `"{\"seq\": 7}"`, idHeader: id},
		{name: "Debezium Server, JSON headers", file: "application.properties", server: true,
			key:      `{"schema":{"type":"string","optional":false},"payload":"2"}`,
			value:    `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"seq\": 7}"}`,
			idHeader: `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"` + id + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL)
			insertOutboxEvent(ctx, t, pool, 7)
			_, brokers := testenv.Kafka(t)
			content := exampleConnector(pgURL, slot, tc.extra)
			if tc.server {
				content = serverProperties(pgURL, slot, brokers)
			}
			p := runDebeziumBinary(t, tc.file, content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
			r := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, 1)[0]
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d", code)
			}
			if string(r.Key) != tc.key {
				t.Errorf("key\n got %s\nwant %s", r.Key, tc.key)
			}
			if string(r.Value) != tc.value {
				t.Errorf("value\n got %s\nwant %s", r.Value, tc.value)
			}
			if header(r, "id") != tc.idHeader || header(r, "eventType") == "" {
				t.Errorf("headers %v, want id %s and eventType", r.Headers, tc.idHeader)
			}
			if p := javaPartition(r.Key, partitions); r.Partition != p {
				t.Errorf("partition %d, the Java producer's is %d", r.Partition, p)
			}
			if r.Timestamp.UnixMilli() != 1556890294484 {
				t.Errorf("timestamp %d, want the timestamp column's 1556890294484", r.Timestamp.UnixMilli())
			}
		})
	}
}

// serverProperties is a Debezium Server application.properties for the
// example's table, with the formats left at their defaults (JSON with
// schemas for key, value and headers).
func serverProperties(pgURL, slot string, brokers []string) string {
	u, _ := url.Parse(pgURL)
	return fmt.Sprintf(`debezium.sink.type=kafka
debezium.sink.kafka.producer.bootstrap.servers=%s
debezium.sink.kafka.producer.key.serializer=org.apache.kafka.common.serialization.StringSerializer
debezium.sink.kafka.producer.value.serializer=org.apache.kafka.common.serialization.StringSerializer
debezium.source.connector.class=io.debezium.connector.postgresql.PostgresConnector
debezium.source.offset.storage.file.filename=data/offsets.dat
debezium.source.offset.flush.interval.ms=0
debezium.source.database.hostname=%s
debezium.source.database.port=%s
debezium.source.database.user=%s
debezium.source.database.dbname=%s
debezium.source.database.sslmode=disable
debezium.source.topic.prefix=tutorial
debezium.source.plugin.name=pgoutput
debezium.source.slot.name=%s
debezium.source.table.include.list=inventory.outboxevent
debezium.transforms=outbox
debezium.transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
debezium.transforms.outbox.route.topic.replacement=\${routedByValue}.events
debezium.transforms.outbox.table.field.event.timestamp=timestamp
debezium.transforms.outbox.table.fields.additional.placement=type:header:eventType
`, strings.Join(brokers, ","), u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"), slot)
}

// TestDebeziumPassThroughConverters takes over a connector that sends a
// bytea payload the application serialized itself (Avro with a schema id,
// Protobuf, anything) through Debezium's pass-through converter, under its
// name since Debezium 2.0 and its earlier one. Each record's value must be
// the row's bytes exactly: NUL bytes, bytes that are not UTF-8, an empty
// payload as an empty value, NULL as a null value; the key as the key
// converter writes it.
func TestDebeziumPassThroughConverters(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
	}{
		{name: "BinaryDataConverter", extra: `, "key.converter": "org.apache.kafka.connect.storage.StringConverter",
			"value.converter": "io.debezium.converters.BinaryDataConverter"`},
		// Before Debezium 2.0, for key and value: the varchar key goes to
		// the delegate, the bytea payload does not.
		{name: "ByteBufferConverter", extra: `, "key.converter": "io.debezium.converters.ByteBufferConverter",
			"key.converter.delegate.converter.type": "org.apache.kafka.connect.storage.StringConverter",
			"value.converter": "io.debezium.converters.ByteBufferConverter"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pgURL, pool, slot := debeziumDatabase(ctx, t, strings.Replace(outboxEventDDL, "payload       jsonb", "payload       bytea", 1))
			want := insertBinaryPayloads(ctx, t, pool)
			_, brokers := testenv.Kafka(t)
			p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, tc.extra), "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
			recs := testenv.Consume(ctx, t, brokers, []string{"Order.events"}, len(want))
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d", code)
			}
			checkBinaryRecords(t, recs, want)
		})
	}
}

// TestNativeBinaryPayloads: outboxrelay's own configuration does the same
// pass-through, with its default raw format and with routing.value_format
// bytes.
func TestNativeBinaryPayloads(t *testing.T) {
	for _, format := range []string{"raw", "bytes"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pgURL := testenv.Postgres(t)
			pool := connectPool(t, pgURL)
			if _, err := pool.Exec(ctx, strings.Replace(outboxEventDDL, "payload       jsonb", "payload       bytea", 1)); err != nil {
				t.Fatal(err)
			}
			_, brokers := testenv.Kafka(t)
			name := uniqueName(t)
			p := runBinary(t, yamlConfig(pgURL, brokers, fmt.Sprintf(
				"outbox:\n  table: inventory.outboxevent\ncdc:\n  slot: %s\n  publication: %s\n  status_interval: 200ms\nrouting:\n  value_format: %s\n",
				name, name, format)))
			waitSlotActive(ctx, t, pool, name)
			want := insertBinaryPayloads(ctx, t, pool)
			recs := testenv.Consume(ctx, t, brokers, []string{"outbox.event.Order"}, len(want))
			if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("outboxrelay exited with %d", code)
			}
			checkBinaryRecords(t, recs, want)
		})
	}
}

// insertBinaryPayloads commits payloads text would mangle into
// inventory.outboxevent, whose payload column is bytea: NUL bytes, bytes
// that are not UTF-8, an empty payload, NULL, a Confluent-framed message
// and a 4 KiB blob of every byte value. It returns them by event id; the
// aggregate id is the payload's index.
func insertBinaryPayloads(ctx context.Context, t *testing.T, pool *pgxpool.Pool) map[string][]byte {
	t.Helper()
	blob := make([]byte, 4096)
	for i := range blob {
		blob[i] = byte(i * 7) // every byte value, 0x00 and 0xff included
	}
	payloads := [][]byte{{0x00}, {0xff, 0x00, 0xfe, 0x80, 0xc3, 0x28}, {}, nil, {0x00, 0x00, 0x00, 0x00, 0x2a, 0x02, 0x06, 'a', 'b', 'c'}, blob}
	want := map[string][]byte{}
	for i, p := range payloads {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		// pgx sends a nil []byte as NULL, an empty one as an empty bytea.
		if _, err := pool.Exec(ctx, `INSERT INTO inventory.outboxevent VALUES ($1, 'Order', $2, 'OrderCreated', '2019-05-03 13:31:34.484', $3)`,
			id, fmt.Sprint(i), p); err != nil {
			t.Fatal(err)
		}
		want[id] = p
	}
	var nulls int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inventory.outboxevent WHERE payload IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
		t.Fatalf("%d NULL payloads stored (%v); the test needs exactly one, and an empty bytea", nulls, err)
	}
	return want
}

// checkBinaryRecords checks that every event of want was published once,
// its value the payload's bytes exactly (null for NULL), its key the
// aggregate id's text and its partition the Java producer's for it.
func checkBinaryRecords(t *testing.T, recs []*kgo.Record, want map[string][]byte) {
	t.Helper()
	want = maps.Clone(want)
	for _, r := range recs {
		id := header(r, "id")
		w, ok := want[id]
		if !ok {
			t.Errorf("record with id header %q, which is no row's or came twice", id)
			continue
		}
		delete(want, id)
		switch {
		case w == nil && r.Value != nil:
			t.Errorf("event %s (NULL payload): value %x, want null", id, r.Value)
		case w != nil && r.Value == nil:
			t.Errorf("event %s: value null, want the %d bytes %x", id, len(w), w)
		case !bytes.Equal(r.Value, w):
			t.Errorf("event %s: value %x, want %x", id, r.Value, w)
		}
		wantKey := strings.TrimLeft(id[len(id)-12:], "0")
		if wantKey == "" {
			wantKey = "0"
		}
		if string(r.Key) != wantKey {
			t.Errorf("event %s: key %q, want %q (the aggregate id's text)", id, r.Key, wantKey)
		}
		if p := javaPartition(r.Key, partitions); r.Partition != p {
			t.Errorf("event %s: partition %d, the Java producer's is %d", id, r.Partition, p)
		}
	}
	if len(want) > 0 {
		t.Errorf("%d events not published: %v", len(want), slices.Collect(maps.Keys(want)))
	}
}

// TestDebeziumPassThroughNeedsDelegate: with BinaryDataConverter and no
// delegate.converter.type, a payload column that is not bytea fails every
// record in Kafka Connect. outboxrelay refuses the table at start, before
// any row is committed, naming the column and the ways out.
func TestDebeziumPassThroughNeedsDelegate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pgURL, _, slot := debeziumDatabase(ctx, t, outboxEventDDL)
	_, brokers := testenv.Kafka(t)
	p := runDebeziumBinary(t, "c.json", exampleConnector(pgURL, slot, `, "value.converter": "io.debezium.converters.BinaryDataConverter"`),
		"OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	if code := p.exit(t, 30*time.Second); code == 0 {
		t.Fatalf("outboxrelay exited with 0; want it to refuse the jsonb payload")
	}
	out := p.stopReason(t)
	for _, want := range []string{`value column "payload" has type jsonb`, "make the column bytea", "routing.value_delegate_format", "value.converter.delegate.converter.type"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
}

// A connector whose table.include.list names two outbox tables: both are
// relayed from its one slot, and each record is typed by its own table's
// catalog, as Debezium's connector types each table's changes: the jsonb
// payload is io.debezium.data.Json, the text one a plain string.
func TestDebeziumSeveralTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pgURL, pool, slot := debeziumDatabase(ctx, t, outboxEventDDL+`;
		CREATE TABLE inventory.invoiceevent (LIKE inventory.outboxevent INCLUDING ALL);
		ALTER TABLE inventory.invoiceevent ALTER COLUMN payload TYPE text`)
	_, brokers := testenv.Kafka(t)
	content := strings.Replace(exampleConnector(pgURL, slot, ""), `"table.include.list" : "inventory.outboxevent"`,
		`"table.include.list" : "inventory.outboxevent,inventory.invoiceevent"`, 1)
	p := runDebeziumBinary(t, "c.json", content, "OUTBOXRELAY_KAFKA_BROKERS="+strings.Join(brokers, ","))
	waitSlotActive(ctx, t, pool, slot)
	order := insertOutboxEvent(ctx, t, pool, 7)
	invoice := "00000000-0000-4000-8000-000000000008"
	if _, err := pool.Exec(ctx, `INSERT INTO inventory.invoiceevent VALUES ($1, 'Invoice', '3', 'InvoiceSent', '2019-05-03 13:31:34.484', '{"seq": 8}')`, invoice); err != nil {
		t.Fatal(err)
	}
	recs := testenv.Consume(ctx, t, brokers, []string{"Order.events", "Invoice.events"}, 2)
	if code := p.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("outboxrelay exited with %d", code)
	}
	want := map[string]struct{ topic, key, value string }{
		order: {"Order.events", `{"schema":{"type":"string","optional":false},"payload":"2"}`,
			`{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"seq\": 7}"}`},
		invoice: {"Invoice.events", `{"schema":{"type":"string","optional":false},"payload":"3"}`,
			`{"schema":{"type":"string","optional":true},"payload":"{\"seq\": 8}"}`},
	}
	for _, r := range recs {
		w, ok := want[header(r, "id")]
		if !ok {
			t.Errorf("record with id %q on %s", header(r, "id"), r.Topic)
			continue
		}
		delete(want, header(r, "id"))
		if r.Topic != w.topic || string(r.Key) != w.key || string(r.Value) != w.value {
			t.Errorf("record %s on %s\n key %s\nwant %s\n value %s\nwant %s", header(r, "id"), r.Topic, r.Key, w.key, r.Value, w.value)
		}
	}
	for id := range want {
		t.Errorf("event %s never reached Kafka", id)
	}
}
