package app_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
)

// The connector JSON of Debezium's outbox example (debezium-examples,
// outbox/register-postgres.json), unchanged.
const exampleJSON = `{
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "database.hostname": "order-db",
    "database.port": "5432",
    "database.user": "postgresuser",
    "database.password": "postgrespw",
    "database.dbname" : "orderdb",
    "topic.prefix": "dbserver1",
    "schema.include.list": "inventory",
    "table.include.list" : "inventory.outboxevent",
    "tombstones.on.delete" : "false",
    "transforms" : "outbox",
    "transforms.outbox.type" : "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.route.topic.replacement" : "${routedByValue}.events",
    "transforms.outbox.table.field.event.timestamp" : "timestamp",
    "transforms.outbox.table.fields.additional.placement" : "type:header:eventType"
}`

func translate(t *testing.T, text string, env debezium.Env) *debezium.Translation {
	t.Helper()
	f, err := debezium.ParseFile([]byte(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return debezium.Translate(f, env)
}

func TestTranslateOutboxExample(t *testing.T) {
	tr := translate(t, exampleJSON, debezium.Env{})
	if err := tr.Err(); err != nil {
		t.Fatalf("the documentation's connector does not run: %v", err)
	}
	want := map[string]any{
		"postgres.url":                 "postgres://postgresuser@order-db:5432/orderdb",
		"outbox.table":                 "inventory.outboxevent",
		"outbox.columns.aggregatetype": "aggregatetype",
		"outbox.columns.aggregateid":   "aggregateid",
		"outbox.columns.payload":       "payload",
		"cdc.slot":                     "debezium",
		"cdc.publication":              "dbz_publication",
		"cdc.create_publication":       true,
		"routing.topic_replacement":    "${routedByValue}.events",
		"routing.timestamp_column":     "timestamp",
		"routing.additional_fields":    []string{"type:header:eventType"},
		"routing.schema_topic_prefix":  "dbserver1",
		"routing.tracing_column":       "tracingspancontext",
		"routing.key_format":           "json+schema",
		"routing.value_format":         "json+schema",
		"routing.header_format":        "simple",
	}
	for k, v := range want {
		if got, _ := tr.Setting(k); !reflect.DeepEqual(got, v) {
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
	for _, opt := range []string{"plugin.name", "key.converter", "value.converter", "tombstones.on.delete", "schema.include.list", "tasks.max"} {
		if !hasNote(tr, opt) {
			t.Errorf("no note for %s", opt)
		}
	}

	// translate keeps the password out; run uses it.
	public, err := tr.YAML(false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(public), "postgrespw") {
		t.Errorf("translate printed the password:\n%s", public)
	}
	secret, _ := tr.YAML(true)
	cfg, err := config.LoadTranslated(secret, "", []string{"OUTBOXRELAY_KAFKA_BROKERS=kafka:9092"})
	if err != nil {
		t.Fatalf("the translated YAML does not load: %v\n%s", err, secret)
	}
	if cfg.Postgres.URL != "postgres://postgresuser:postgrespw@order-db:5432/orderdb" || cfg.CDC.Slot != "debezium" {
		t.Errorf("loaded url %q slot %q", strings.ReplaceAll(cfg.Postgres.URL, "postgrespw", "xxxxx"), cfg.CDC.Slot)
	}
	rc := cfg.DebeziumRouter()
	if rc == nil || rc.TopicReplacement != "${routedByValue}.events" || rc.KeyFormat != debezium.FormatJSONSchema || rc.AdditionalFieldsOptional {
		t.Errorf("router config %+v", rc)
	}
	// And the public YAML, with the password from elsewhere.
	if _, err := config.LoadTranslated(public, "", []string{"OUTBOXRELAY_KAFKA_BROKERS=kafka:9092"}); err != nil {
		t.Errorf("translate's YAML does not load: %v\n%s", err, public)
	}
}

func hasNote(tr *debezium.Translation, option string) bool {
	return slices.ContainsFunc(tr.Notes, func(n debezium.Note) bool { return n.Option == option })
}

func noteSeverity(tr *debezium.Translation, option string) (debezium.Severity, bool) {
	for _, n := range tr.Notes {
		if n.Option == option {
			return n.Severity, true
		}
	}
	return 0, false
}

// base is a minimal runnable connector; cases add options.
func baseConnector(extra map[string]string) string {
	opts := map[string]string{
		"connector.class":        "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname":      "db",
		"database.user":          "u",
		"database.dbname":        "app",
		"topic.prefix":           "p",
		"plugin.name":            "pgoutput",
		"table.include.list":     "public.outbox",
		"transforms":             "outbox",
		"transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
	}
	for k, v := range extra {
		if v == "-" {
			delete(opts, k)
		} else {
			opts[k] = v
		}
	}
	var b strings.Builder
	b.WriteString("{")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range opts {
			if !yield(k) {
				return
			}
		}
	})
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:%q", k, opts[k])
	}
	b.WriteString("}")
	return b.String()
}

func TestTranslateOptions(t *testing.T) {
	type note struct {
		option   string
		severity debezium.Severity
		says     string
	}
	for _, tc := range []struct {
		name  string
		opts  map[string]string
		want  map[string]any
		notes []note
	}{
		{name: "defaults", opts: nil, want: map[string]any{
			"cdc.slot": "debezium", "cdc.publication": "dbz_publication", "cdc.create_publication": true,
			"postgres.url": "postgres://u@db:5432/app", "outbox.columns.id": "id", "routing.topic_prefix": "outbox.event.",
			"routing.header_format": "simple", "source": "cdc"}},
		{name: "connection", opts: map[string]string{"database.port": "6543", "database.sslmode": "verify-full", "database.sslrootcert": "/ca.pem"},
			want: map[string]any{"postgres.url": "postgres://u@db:6543/app?sslmode=verify-full&sslrootcert=%2Fca.pem"}},
		{name: "slot and publication", opts: map[string]string{"slot.name": "outbox_slot", "publication.name": "outbox_pub", "publication.autocreate.mode": "disabled"},
			want: map[string]any{"cdc.slot": "outbox_slot", "cdc.publication": "outbox_pub", "cdc.create_publication": false}},
		{name: "filtered publication", opts: map[string]string{"publication.autocreate.mode": "filtered"}, want: map[string]any{"cdc.create_publication": true}},
		{name: "bad publication mode", opts: map[string]string{"publication.autocreate.mode": "some"},
			notes: []note{{"publication.autocreate.mode", debezium.Unsupported, "all_tables"}}},
		{name: "decoderbufs", opts: map[string]string{"plugin.name": "decoderbufs"},
			notes: []note{{"plugin.name", debezium.Unsupported, "switch Debezium to plugin.name=pgoutput"}}},
		{name: "wal2json", opts: map[string]string{"plugin.name": "wal2json"}, notes: []note{{"plugin.name", debezium.Unsupported, "pgoutput"}}},
		{name: "plugin unset", opts: map[string]string{"plugin.name": "-"}, notes: []note{{"plugin.name", debezium.Warning, "decoderbufs"}}},
		{name: "old option names", opts: map[string]string{"table.include.list": "-", "table.whitelist": `inventory\.outboxevent`, "topic.prefix": "-", "database.server.name": "dbserver1"},
			want: map[string]any{"outbox.table": "inventory.outboxevent", "routing.schema_topic_prefix": "dbserver1"}},
		{name: "table without schema", opts: map[string]string{"table.include.list": "events"}, want: map[string]any{"outbox.table": "public.events"}},
		{name: "two tables", opts: map[string]string{"table.include.list": `sales\.outbox, billing.outbox`}, want: map[string]any{"outbox.tables": []string{"sales.outbox", "billing.outbox"}, "outbox.table": nil}},
		// Debezium takes every entry as a regular expression matched
		// against the whole schema.table (Selectors, Predicates.includes,
		// Strings.RegExSplitter for the list); literal names stay names.
		{name: "a pattern among tables", opts: map[string]string{"table.include.list": "public.a,public.b.*"},
			want:  map[string]any{"outbox.table": "public.a", "outbox.table_patterns": []string{"public.b.*"}},
			notes: []note{{"table.include.list", debezium.Info, "outbox.table_patterns public.b.*"}}},
		{name: "table pattern", opts: map[string]string{"table.include.list": `public\.outbox_.*`},
			want:  map[string]any{"outbox.table": nil, "outbox.tables": nil, "outbox.table_patterns": []string{`public\.outbox_.*`}},
			notes: []note{{"publication.autocreate.mode", debezium.Warning, "FOR ALL TABLES first"}}},
		{name: "table pattern with a publication the relay does not create", opts: map[string]string{"table.include.list": `public\.outbox_.*`, "publication.autocreate.mode": "disabled"},
			want: map[string]any{"outbox.table_patterns": []string{`public\.outbox_.*`}, "cdc.create_publication": false}},
		{name: "escaped comma", opts: map[string]string{"table.include.list": `public\.outbox_[a-z]{1\,3}, sales.outbox`},
			want: map[string]any{"outbox.table": "sales.outbox", "outbox.table_patterns": []string{`public\.outbox_[a-z]{1,3}`}}},
		{name: "predicate with a table pattern", opts: map[string]string{"table.include.list": `inventory\.outbox.*`, "topic.prefix": "dbserver1",
			"transforms.outbox.predicate": "p", "predicates": "p",
			"predicates.p.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches", "predicates.p.pattern": `dbserver1\.inventory\..*`},
			notes: []note{{"transforms.outbox.predicate", debezium.Info, "(dbserver1.<schema>.<table>)"}}},
		{name: "pattern Go lacks", opts: map[string]string{"table.include.list": `public\.(?!x).*`},
			notes: []note{{"table.include.list", debezium.Unsupported, "lookaround"}}},
		{name: "schema list a pattern's schema passes", opts: map[string]string{"table.include.list": `inventory\.outbox.*`, "schema.include.list": "Inventory"},
			want:  map[string]any{"outbox.table_patterns": []string{`inventory\.outbox.*`}},
			notes: []note{{"schema.include.list", debezium.Info, "selects nothing more"}}},
		{name: "schema list a pattern leaves open", opts: map[string]string{"table.include.list": `.*\.outbox`, "schema.include.list": "inventory"},
			notes: []note{{"schema.include.list", debezium.Unsupported, "write the schema into each pattern"}}},
		{name: "schema exclusion a pattern's schema passes", opts: map[string]string{"table.include.list": `inventory\.outbox.*`, "schema.exclude.list": "audit"},
			notes: []note{{"schema.exclude.list", debezium.Info, "selects nothing more"}}},
		{name: "schema exclusion of a pattern's schema", opts: map[string]string{"table.include.list": `audit\.outbox.*`, "schema.exclude.list": "audit"},
			notes: []note{{"schema.exclude.list", debezium.Unsupported, "write the schema into each pattern"}}},
		{name: "table exclusion with inclusion", opts: map[string]string{"table.include.list": "public.outbox", "table.exclude.list": "public.x"},
			notes: []note{{"table.exclude.list", debezium.Unsupported, "Debezium refuses"}}},
		{name: "table exclusion alone", opts: map[string]string{"table.include.list": "-", "table.exclude.list": "public.x"},
			notes: []note{{"table.exclude.list", debezium.Info, "never every table but some"}}},
		{name: "intervals", opts: map[string]string{"status.update.interval.ms": "5000", "heartbeat.interval.ms": "30000"},
			want: map[string]any{"cdc.status_interval": "5s", "cdc.heartbeat_interval": "30s"}},
		{name: "topic prefix replacement", opts: map[string]string{"transforms.outbox.route.topic.replacement": "events.${routedByValue}"},
			want: map[string]any{"routing.topic_prefix": "events.", "routing.topic_replacement": nil}},
		{name: "constant topic", opts: map[string]string{"transforms.outbox.route.topic.replacement": "all-events"},
			want: map[string]any{"routing.topic": "all-events"}},
		{name: "regex", opts: map[string]string{"transforms.outbox.route.topic.regex": "(.*)Aggregate", "transforms.outbox.route.topic.replacement": "$1.events"},
			want: map[string]any{"routing.topic_regex": "(.*)Aggregate", "routing.topic_replacement": "$1.events"}},
		{name: "regex Go lacks", opts: map[string]string{"transforms.outbox.route.topic.regex": "(?!x).*"},
			notes: []note{{"transforms.outbox.route.topic.regex", debezium.Unsupported, "lookaround"}}},
		{name: "router columns", opts: map[string]string{"transforms.outbox.table.field.event.id": "event_id", "transforms.outbox.table.field.event.key": "key",
			"transforms.outbox.table.field.event.payload": "body", "transforms.outbox.route.by.field": "destination"},
			want: map[string]any{"outbox.columns.id": "event_id", "outbox.columns.aggregateid": "key", "outbox.columns.payload": "body", "outbox.columns.aggregatetype": "destination"}},
		{name: "route by the type column", opts: map[string]string{"transforms.outbox.route.by.field": "type"},
			want:  map[string]any{"outbox.columns.aggregatetype": "type", "outbox.columns.type": "(none)"},
			notes: []note{{"transforms.outbox.route.by.field", debezium.Info, "event type"}}},
		// EventRouterDelegate reads the key on its own (defineRecordKey):
		// any column, another role's too.
		{name: "route by the key column", opts: map[string]string{"transforms.outbox.route.by.field": "aggregateid"},
			want: map[string]any{"outbox.columns.aggregatetype": "aggregateid", "outbox.columns.aggregateid": "aggregateid"}},
		{name: "key by the id column", opts: map[string]string{"transforms.outbox.table.field.event.key": "id"},
			want: map[string]any{"outbox.columns.id": "id", "outbox.columns.aggregateid": "id"}},
		{name: "payload by the id column", opts: map[string]string{"transforms.outbox.table.field.event.payload": "id"},
			notes: []note{{"transforms.outbox.table.field.event.payload", debezium.Unsupported, "a column for each role"}}},
		{name: "router options", opts: map[string]string{
			"transforms.outbox.table.fields.additional.placement":        "type:header:eventType, tenant:envelope, part:partition",
			"transforms.outbox.table.fields.additional.error.on.missing": "false",
			"transforms.outbox.table.expand.json.payload":                "true",
			"transforms.outbox.table.json.payload.null.behavior":         "optional_bytes",
			"transforms.outbox.route.tombstone.on.empty.payload":         "TRUE",
			"transforms.outbox.table.field.event.schema.version":         "version",
			"transforms.outbox.tracing.span.context.field":               "trace",
		}, want: map[string]any{
			"routing.additional_fields":          []string{"type:header:eventType", "tenant:envelope", "part:partition"},
			"routing.additional_fields_required": false, "routing.expand_json_payload": true, "routing.json_null_fields": "optional_bytes",
			"routing.tombstone_on_empty_payload": true, "routing.schema_version_column": "version", "routing.tracing_column": "trace"}},
		// Debezium 3.6 renamed table.fields.additional.error.on.missing
		// to table.field.additional.missing, error or ignore.
		{name: "additional missing ignore", opts: map[string]string{"transforms.outbox.table.field.additional.missing": " Ignore"},
			want: map[string]any{"routing.additional_fields_required": false}},
		{name: "additional missing error", opts: map[string]string{"transforms.outbox.table.field.additional.missing": "error"},
			want: map[string]any{"routing.additional_fields_required": nil}},
		{name: "additional missing under both names", opts: map[string]string{
			"transforms.outbox.table.field.additional.missing":           "ignore",
			"transforms.outbox.table.fields.additional.error.on.missing": "false"},
			want: map[string]any{"routing.additional_fields_required": false}},
		{name: "additional missing names disagree", opts: map[string]string{
			"transforms.outbox.table.field.additional.missing":           "error",
			"transforms.outbox.table.fields.additional.error.on.missing": "false"},
			notes: []note{{"transforms.outbox.table.field.additional.missing", debezium.Unsupported, "disagree"}}},
		{name: "bad additional missing", opts: map[string]string{"transforms.outbox.table.field.additional.missing": "skip"},
			notes: []note{{"transforms.outbox.table.field.additional.missing", debezium.Unsupported, `"skip" is not error or ignore`}}},
		{name: "bad placement", opts: map[string]string{"transforms.outbox.table.fields.additional.placement": "type:body"},
			notes: []note{{"transforms.outbox.table.fields.additional.placement", debezium.Unsupported, "placement"}}},
		{name: "bad boolean", opts: map[string]string{"transforms.outbox.table.expand.json.payload": "yes"},
			notes: []note{{"transforms.outbox.table.expand.json.payload", debezium.Unsupported, "true or false"}}},
		// Debezium runs heartbeat.action.query only with a heartbeat:
		// HeartbeatFactory.getScheduledHeartbeat returns none when
		// heartbeat.interval.ms is 0; DatabaseHeartbeatFactory none for a
		// blank query.
		{name: "heartbeat action query", opts: map[string]string{"heartbeat.interval.ms": "1000", "heartbeat.action.query": "INSERT INTO hb VALUES (now())"},
			want:  map[string]any{"cdc.heartbeat_interval": "1s", "cdc.heartbeat_query": "INSERT INTO hb VALUES (now())"},
			notes: []note{{"heartbeat.action.query", debezium.Info, "run as written at every heartbeat"}}},
		{name: "heartbeat action query without a heartbeat", opts: map[string]string{"heartbeat.action.query": "INSERT INTO hb VALUES (now())"},
			want:  map[string]any{"cdc.heartbeat_interval": nil, "cdc.heartbeat_query": nil},
			notes: []note{{"heartbeat.action.query", debezium.Info, "not run: heartbeat.interval.ms is 0"}}},
		{name: "blank heartbeat action query", opts: map[string]string{"heartbeat.interval.ms": "1000", "heartbeat.action.query": "  "},
			want: map[string]any{"cdc.heartbeat_query": nil}},
		// EventRouterDelegate.handleUnexpectedOperation: fatal throws on
		// an UPDATE; warn and error log and skip it.
		{name: "invalid op behavior fatal", opts: map[string]string{"transforms.outbox.table.op.invalid.behavior": "FATAL"},
			want:  map[string]any{"cdc.on_update": "fail"},
			notes: []note{{"transforms.outbox.table.op.invalid.behavior", debezium.Info, "stops relaying with an error naming the row"}}},
		{name: "invalid op behavior warn", opts: map[string]string{"transforms.outbox.table.op.invalid.behavior": "warn"},
			want: map[string]any{"cdc.on_update": nil}},
		{name: "removed router option", opts: map[string]string{"transforms.outbox.table.field.event.payload.id": "aggregateid"},
			notes: []note{{"transforms.outbox.table.field.event.payload.id", debezium.Warning, "removed in Debezium 2.0"}}},
		{name: "unknown router option", opts: map[string]string{"transforms.outbox.route.topic.prefix": "x"},
			notes: []note{{"transforms.outbox.route.topic.prefix", debezium.Warning, "unknown outbox router option"}}},
		{name: "converters", opts: map[string]string{
			"key.converter":   "org.apache.kafka.connect.storage.StringConverter",
			"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
			"header.converter": "org.apache.kafka.connect.json.JsonConverter", "header.converter.schemas.enable": "false"},
			want: map[string]any{"routing.key_format": "string", "routing.value_format": "json", "routing.header_format": "json"}},
		{name: "bytes", opts: map[string]string{"value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"},
			want: map[string]any{"routing.value_format": "bytes"}},
		// Debezium's pass-through converters, under both names; their
		// delegate's options sit under delegate.converter.type.
		{name: "BinaryDataConverter", opts: map[string]string{"value.converter": "io.debezium.converters.BinaryDataConverter"},
			want: map[string]any{"routing.value_format": "bytes", "routing.value_delegate_format": nil}},
		{name: "ByteBufferConverter for key and value", opts: map[string]string{"key.converter": "io.debezium.converters.ByteBufferConverter",
			"value.converter": "io.debezium.converters.ByteBufferConverter"},
			want: map[string]any{"routing.key_format": "bytes", "routing.value_format": "bytes", "routing.key_delegate_format": nil}},
		{name: "pass-through with JsonConverter delegates", opts: map[string]string{
			"key.converter":                                          "io.debezium.converters.BinaryDataConverter",
			"key.converter.delegate.converter.type":                  "org.apache.kafka.connect.json.JsonConverter",
			"value.converter":                                        "io.debezium.converters.ByteBufferConverter",
			"value.converter.delegate.converter.type":                "org.apache.kafka.connect.json.JsonConverter",
			"value.converter.delegate.converter.type.schemas.enable": "false"},
			want: map[string]any{"routing.key_format": "bytes", "routing.key_delegate_format": "json+schema",
				"routing.value_format": "bytes", "routing.value_delegate_format": "json"}},
		{name: "pass-through with a StringConverter delegate", opts: map[string]string{
			"value.converter":                         "io.debezium.converters.BinaryDataConverter",
			"value.converter.delegate.converter.type": "org.apache.kafka.connect.storage.StringConverter",
			// schemas.enable is the converter's, not the delegate's: no effect.
			"value.converter.schemas.enable": "false"},
			want:  map[string]any{"routing.value_format": "bytes", "routing.value_delegate_format": "string"},
			notes: []note{{"value.converter.schemas.enable", debezium.Info, "no effect"}}},
		{name: "pass-through delegating to a pass-through", opts: map[string]string{
			"value.converter":                                                 "io.debezium.converters.BinaryDataConverter",
			"value.converter.delegate.converter.type":                         "io.debezium.converters.BinaryDataConverter",
			"value.converter.delegate.converter.type.delegate.converter.type": "org.apache.kafka.connect.storage.StringConverter"},
			want: map[string]any{"routing.value_format": "bytes", "routing.value_delegate_format": "string"}},
		{name: "pass-through delegating to ByteArrayConverter", opts: map[string]string{
			"value.converter":                         "io.debezium.converters.BinaryDataConverter",
			"value.converter.delegate.converter.type": "org.apache.kafka.connect.converters.ByteArrayConverter"},
			want:  map[string]any{"routing.value_format": "bytes", "routing.value_delegate_format": nil},
			notes: []note{{"value.converter.delegate.converter.type", debezium.Info, "refuses what is not bytes"}}},
		{name: "pass-through with an Avro delegate", opts: map[string]string{
			"value.converter":                                             "io.debezium.converters.BinaryDataConverter",
			"value.converter.delegate.converter.type":                     "io.confluent.connect.avro.AvroConverter",
			"value.converter.delegate.converter.type.schema.registry.url": "http://r"},
			notes: []note{{"value.converter.delegate.converter.type", debezium.Unsupported, "AvroConverter"},
				{"value.converter.delegate.converter.type.schema.registry.url", debezium.Info, "no effect"}}},
		{name: "Avro", opts: map[string]string{"value.converter": "io.confluent.connect.avro.AvroConverter", "value.converter.schema.registry.url": "http://r"},
			want: map[string]any{"routing.value_format": "avro", "schema_registry.url": "http://r", "schema_registry.auto_register": nil}},
		{name: "Avro key and value with the registry's settings", opts: map[string]string{
			"key.converter":                                           "io.confluent.connect.avro.AvroConverter",
			"key.converter.schema.registry.url":                       "https://r:8081",
			"key.converter.basic.auth.credentials.source":             "USER_INFO",
			"key.converter.basic.auth.user.info":                      "relay:s3cret",
			"value.converter":                                         "io.confluent.connect.avro.AvroConverter",
			"value.converter.schema.registry.url":                     "https://r:8081",
			"value.converter.auto.register.schemas":                   "false",
			"value.converter.use.latest.version":                      "true",
			"value.converter.value.subject.name.strategy":             "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
			"value.converter.schema.registry.ssl.truststore.location": "/etc/ts.jks"},
			want: map[string]any{"routing.key_format": "avro", "routing.value_format": "avro", "schema_registry.url": "https://r:8081",
				"schema_registry.username": "relay", "schema_registry.auto_register": false, "schema_registry.use_latest_version": true,
				"schema_registry.subject_name_strategy": "topic_record"},
			notes: []note{{"key.converter.basic.auth.user.info", debezium.Info, "password"},
				{"value.converter.schema.registry.ssl.truststore.location", debezium.Unsupported, "PEM"}}},
		{name: "Avro key and value with different registries", opts: map[string]string{
			"key.converter":                       "io.confluent.connect.avro.AvroConverter",
			"key.converter.schema.registry.url":   "http://a",
			"value.converter":                     "io.confluent.connect.avro.AvroConverter",
			"value.converter.schema.registry.url": "http://b"},
			notes: []note{{"value.converter.schema.registry.url", debezium.Unsupported, "share one schema_registry"}}},
		{name: "Avro with the user in the URL", opts: map[string]string{"value.converter": "io.confluent.connect.avro.AvroConverter",
			"value.converter.schema.registry.url": "https://relay:s3cret@r:8081", "value.converter.basic.auth.credentials.source": "URL"},
			want: map[string]any{"schema_registry.url": "https://r:8081", "schema_registry.username": "relay"}},
		{name: "Avro without a registry", opts: map[string]string{"value.converter": "io.confluent.connect.avro.AvroConverter"},
			notes: []note{{"value.converter.schema.registry.url", debezium.Unsupported, "needs schema.registry.url"}}},
		{name: "JSON Schema key, Protobuf value", opts: map[string]string{
			"key.converter":                         "io.confluent.connect.json.JsonSchemaConverter",
			"key.converter.schema.registry.url":     "http://r",
			"value.converter":                       "io.confluent.connect.protobuf.ProtobufConverter",
			"value.converter.schema.registry.url":   "http://r",
			"value.converter.auto.register.schemas": "false"},
			want: map[string]any{"routing.key_format": "json_sr", "routing.value_format": "protobuf", "schema_registry.url": "http://r", "schema_registry.auto_register": false}},
		{name: "JSON Schema and Protobuf options other than the defaults", opts: map[string]string{
			"key.converter":                              "io.confluent.connect.json.JsonSchemaConverter",
			"key.converter.schema.registry.url":          "http://r",
			"key.converter.object.additional.properties": "false",
			"key.converter.json.fail.invalid.schema":     "true",
			"key.converter.decimal.format":               "NUMERIC",
			"value.converter":                            "io.confluent.connect.protobuf.ProtobufConverter",
			"value.converter.schema.registry.url":        "http://r",
			"value.converter.wrapper.for.nullables":      "true",
			"value.converter.scrub.invalid.names":        "false",
			"value.converter.delegate.converter.type":    "x"},
			want: map[string]any{"routing.key_format": "json_sr", "routing.value_format": "protobuf"},
			notes: []note{{"key.converter.object.additional.properties", debezium.Unsupported, "default, true"},
				{"key.converter.decimal.format", debezium.Unsupported, "default, BASE64"},
				{"value.converter.wrapper.for.nullables", debezium.Unsupported, "default, false"},
				{"key.converter.json.fail.invalid.schema", debezium.Info, "JSON Schema converter setting with no effect"}}},
		{name: "Protobuf without a registry", opts: map[string]string{"value.converter": "io.confluent.connect.protobuf.ProtobufConverter"},
			notes: []note{{"value.converter.schema.registry.url", debezium.Unsupported, "Protobuf converter needs schema.registry.url"}}},
		{name: "Apicurio's Avro converter", opts: map[string]string{"value.converter": "io.apicurio.registry.utils.converter.AvroConverter", "value.converter.schema.registry.url": "http://r/apis/ccompat/v7"},
			want:  map[string]any{"routing.value_format": "avro", "schema_registry.url": "http://r/apis/ccompat/v7"},
			notes: []note{{"value.converter", debezium.Warning, "Confluent wire format"}}},
		{name: "replace.null.with.default false", opts: map[string]string{"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.replace.null.with.default": "false"},
			notes: []note{{"value.converter.replace.null.with.default", debezium.Unsupported, "default"}}},
		{name: "decimal.format NUMERIC", opts: map[string]string{"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.decimal.format": "NUMERIC"},
			notes: []note{{"value.converter.decimal.format", debezium.Unsupported, "BASE64"}}},
		{name: "decimal.format BASE64", opts: map[string]string{"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.decimal.format": "base64"}},
		// PostgresConnectorConfig at the v3.x.0.Final tags: lsn.flush.mode
		// came in 3.4 and replaced flush.lsn.source (resolveLsnFlushMode
		// reads the old key only without the new one); offset.mismatch.
		// strategy in 3.4; publish.via.partition.root in 3.2; the never
		// snapshot mode went in 3.3 (SnapshotMode).
		{name: "lsn.flush.mode", opts: map[string]string{"lsn.flush.mode": "Connector_And_Driver"},
			notes: []note{{"lsn.flush.mode", debezium.Info, "keepalives, as connector_and_driver does"}}},
		{name: "lsn.flush.mode manual", opts: map[string]string{"lsn.flush.mode": "manual"},
			notes: []note{{"lsn.flush.mode", debezium.Warning, "always confirms"}}},
		{name: "flush.lsn.source, deprecated", opts: map[string]string{"flush.lsn.source": "false"},
			notes: []note{{"flush.lsn.source", debezium.Info, "deprecated in Debezium 3.4 for lsn.flush.mode; read as lsn.flush.mode=manual"}, {"flush.lsn.source", debezium.Warning, "always confirms"}}},
		{name: "flush.lsn.source beside lsn.flush.mode", opts: map[string]string{"flush.lsn.source": "false", "lsn.flush.mode": "connector"},
			notes: []note{{"flush.lsn.source", debezium.Info, "ignore it beside lsn.flush.mode"}, {"lsn.flush.mode", debezium.Info, "connector:"}}},
		{name: "lsn.flush.mode misspelt", opts: map[string]string{"lsn.flush.mode": "driver"},
			notes: []note{{"lsn.flush.mode", debezium.Unsupported, "connector_and_driver"}}},
		{name: "lsn.flush.timeout", opts: map[string]string{"lsn.flush.timeout.ms": "5000", "lsn.flush.timeout.action": "warn"},
			notes: []note{{"lsn.flush.timeout.ms", debezium.Info, "wait for no answer"}, {"lsn.flush.timeout.action", debezium.Info, "wait for no answer"}}},
		{name: "offset.mismatch.strategy", opts: map[string]string{"offset.mismatch.strategy": "trust_greater_lsn", "internal.slot.seek.to.known.offset.on.start": "true"},
			notes: []note{{"offset.mismatch.strategy", debezium.Info, "Debezium 3.4 and later"}, {"internal.slot.seek.to.known.offset.on.start", debezium.Info, "deprecated in Debezium 3.4"}}},
		{name: "publish.via.partition.root", opts: map[string]string{"publish.via.partition.root": "true"},
			notes: []note{{"publish.via.partition.root", debezium.Warning, "publish_via_partition_root = true"}}},
		{name: "snapshot mode never, removed in 3.3", opts: map[string]string{"snapshot.mode": "never"},
			want:  map[string]any{"cdc.snapshot": "never"},
			notes: []note{{"snapshot.mode", debezium.Info, "removed in Debezium 3.3"}}},
		{name: "snapshot mode in capitals", opts: map[string]string{"snapshot.mode": " NO_DATA "}, want: map[string]any{"cdc.snapshot": "never"}},
		{name: "snapshot mode of another connector", opts: map[string]string{"snapshot.mode": "when_needed_no_data"},
			notes: []note{{"snapshot.mode", debezium.Unsupported, "SQL Server"}}},
		{name: "options added in 3.2 to 3.6", opts: map[string]string{"guardrail.collections.max": "10", "queue.provider.type": "x", "executor.shutdown.timeout.ms": "1"},
			notes: []note{{"guardrail.collections.max", debezium.Info, "3.3 (guardrail)"}, {"queue.provider.type", debezium.Info, "3.6"}, {"executor.shutdown.timeout.ms", debezium.Info, "3.2"}}},
		{name: "a transform before the router", opts: map[string]string{"transforms": "unwrap,outbox", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState", "transforms.unwrap.drop.tombstones": "false"},
			notes: []note{{"transforms.unwrap", debezium.Unsupported, "comes before the outbox router"}}},
		{name: "Kafka Connect's transforms after the router", opts: map[string]string{"transforms": "outbox,route,stamp,skip",
			"transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter", "transforms.route.regex": "(.*)", "transforms.route.replacement": "x.$1",
			"transforms.stamp.type": "InsertHeader", "transforms.stamp.header": "h", "transforms.stamp.value.literal": "v",
			"transforms.skip.type": "org.apache.kafka.connect.transforms.Filter", "transforms.skip.predicate": "t", "transforms.skip.negate": "true",
			"predicates": "t", "predicates.t.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey", "predicates.t.name": "h"},
			notes: []note{{"transforms", debezium.Info, "route (RegexRouter); then stamp (InsertHeader); then skip (Filter) where not matched by t"}}},
		{name: "a transform outboxrelay does not apply", opts: map[string]string{"transforms": "outbox,cast", "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value", "transforms.cast.spec": "int32"},
			notes: []note{{"transforms.cast", debezium.Unsupported, "after the outbox router outboxrelay applies Kafka Connect's"}}},
		{name: "a struct transform on the payload column", opts: map[string]string{"transforms": "outbox,ins", "transforms.ins.type": "org.apache.kafka.connect.transforms.InsertField$Value", "transforms.ins.topic.field": "t"},
			notes: []note{{"transforms.ins", debezium.Unsupported, "fails on every record with a payload"}}},
		{name: "a struct transform on an envelope", opts: map[string]string{"transforms": "outbox,ins", "transforms.outbox.table.fields.additional.placement": "type:envelope",
			"transforms.ins.type": "org.apache.kafka.connect.transforms.InsertField$Value", "transforms.ins.topic.field": "t"},
			notes: []note{{"transforms", debezium.Info, "ins (InsertField$Value)"}}},
		{name: "an option the transform does not have", opts: map[string]string{"transforms": "outbox,r", "transforms.r.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
			"transforms.outbox.table.fields.additional.placement": "type:envelope", "transforms.r.blacklist": "type"},
			notes: []note{{"transforms.r", debezium.Unsupported, "option blacklist is not one outboxrelay reads"}}},
		{name: "no outbox router", opts: map[string]string{"transforms": "-", "transforms.outbox.type": "-"},
			notes: []note{{"transforms", debezium.Unsupported, "EventRouter"}}},
		{name: "predicate selecting the outbox table", opts: map[string]string{"transforms.outbox.predicate": "isOutbox", "predicates": "isOutbox",
			"predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches", "predicates.isOutbox.pattern": `p\.public\.outbox`},
			notes: []note{{"transforms.outbox.predicate", debezium.Info, "selects p.public.outbox"}}},
		{name: "predicate excluding the outbox table", opts: map[string]string{"transforms.outbox.predicate": "isOutbox", "transforms.outbox.negate": "true",
			"predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches", "predicates.isOutbox.pattern": `.*outbox`},
			notes: []note{{"transforms.outbox.predicate", debezium.Unsupported, "does not select"}}},
		{name: "producer overrides", opts: map[string]string{"producer.override.compression.type": "zstd", "producer.override.max.request.size": "2097152", "producer.override.linger.ms": "5"},
			want:  map[string]any{"kafka.compression": "zstd", "kafka.max_record_bytes": 2097152},
			notes: []note{{"producer.override.linger.ms", debezium.Info, "acks=all"}}},
		{name: "SASL_SSL with SCRAM", opts: map[string]string{"producer.override.security.protocol": "SASL_SSL", "producer.override.sasl.mechanism": "SCRAM-SHA-512",
			"producer.override.sasl.jaas.config":        `org.apache.kafka.common.security.scram.ScramLoginModule required username="relay" password="s3\"cret";`,
			"producer.override.ssl.truststore.type":     "PEM",
			"producer.override.ssl.truststore.location": "/etc/kafka/ca.pem"},
			want: map[string]any{"kafka.tls.enabled": true, "kafka.sasl.mechanism": "scram-sha-512", "kafka.sasl.username": "relay", "kafka.tls.ca_file": "/etc/kafka/ca.pem"}},
		{name: "GSSAPI", opts: map[string]string{"producer.override.security.protocol": "SASL_SSL", "producer.override.sasl.mechanism": "GSSAPI"},
			notes: []note{{"producer.override.sasl.mechanism", debezium.Unsupported, "GSSAPI"}}},
		{name: "JKS truststore", opts: map[string]string{"producer.override.security.protocol": "SSL", "producer.override.ssl.truststore.location": "/ts.jks"},
			notes: []note{{"producer.override.ssl.truststore.location", debezium.Unsupported, "convert it to PEM"}}},
		{name: "ignored and unknown options", opts: map[string]string{"snapshot.mode": "never", "slot.drop.on.stop": "true", "provide.transaction.metadata": "true", "frobnicate": "1"},
			notes: []note{{"slot.drop.on.stop", debezium.Warning, "never drops"}, {"provide.transaction.metadata", debezium.Warning, "transaction"}, {"frobnicate", debezium.Warning, "unknown option"}}},
		// Debezium 3.2 and later add __debezium.context.* headers unless
		// extended.headers.enabled=false; outboxrelay never does.
		{name: "extended headers", opts: map[string]string{"extended.headers.enabled": "true"},
			want: map[string]any{"routing.context_headers": true}},
		{name: "extended headers by default", opts: nil,
			want:  map[string]any{"routing.context_headers": true},
			notes: []note{{"extended.headers.enabled", debezium.Info, "true since Debezium 3.2"}}},
		{name: "no extended headers", opts: map[string]string{"extended.headers.enabled": "FALSE"},
			want: map[string]any{"routing.context_headers": false}},
		{name: "extended headers without topic.prefix", opts: map[string]string{"topic.prefix": "-"},
			want:  map[string]any{"routing.context_headers": nil},
			notes: []note{{"extended.headers.enabled", debezium.Warning, "without topic.prefix"}}},
		{name: "extended headers misspelt", opts: map[string]string{"extended.headers.enabled": "yes"},
			notes: []note{{"extended.headers.enabled", debezium.Unsupported, "not true or false"}}},
		{name: "snapshot when the slot is created", opts: map[string]string{"snapshot.mode": "when_needed"},
			want: map[string]any{"cdc.snapshot": "initial"}},
		{name: "no snapshot", opts: map[string]string{"snapshot.mode": "no_data"},
			want: map[string]any{"cdc.snapshot": "never"}},
		{name: "snapshot always", opts: map[string]string{"snapshot.mode": "always"},
			notes: []note{{"snapshot.mode", debezium.Unsupported, "snapshots only when it creates the slot"}}},
		{name: "binary and time modes", opts: map[string]string{"binary.handling.mode": "base64", "time.precision.mode": "nanoseconds"},
			notes: []note{{"binary.handling.mode", debezium.Unsupported, "bytes only"}, {"time.precision.mode", debezium.Unsupported, "adaptive"}}},
		{name: "value modes", opts: map[string]string{"time.precision.mode": " Connect", "decimal.handling.mode": "string", "interval.handling.mode": "string"},
			want: map[string]any{"routing.time_precision": "connect", "routing.decimal_handling": "string", "routing.interval_handling": "string"}},
		{name: "decimal mode misspelt", opts: map[string]string{"decimal.handling.mode": "float"},
			notes: []note{{"decimal.handling.mode", debezium.Unsupported, "precise"}}},
		{name: "source types with schemas", opts: map[string]string{"column.propagate.source.type": ".*"},
			notes: []note{{"column.propagate.source.type", debezium.Unsupported, "parameters"}}},
		{name: "other connector", opts: map[string]string{"connector.class": "io.debezium.connector.mysql.MySqlConnector"},
			notes: []note{{"connector.class", debezium.Unsupported, "PostgreSQL"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, baseConnector(tc.opts), debezium.Env{})
			for k, v := range tc.want {
				got, ok := tr.Setting(k)
				if v == nil {
					if ok {
						t.Errorf("%s = %#v, want it unset", k, got)
					}
					continue
				}
				if !reflect.DeepEqual(got, v) {
					t.Errorf("%s = %#v, want %#v", k, got, v)
				}
			}
			unsupported := 0
			for _, n := range tc.notes {
				found := false
				for _, got := range tr.Notes {
					if got.Option == n.option && got.Severity == n.severity && strings.Contains(got.Text, n.says) {
						found = true
					}
				}
				if !found {
					t.Errorf("no %s note on %s saying %q; notes:\n%s", n.severity, n.option, n.says, notesText(tr))
				}
				if n.severity == debezium.Unsupported {
					unsupported++
				}
			}
			if err := tr.Err(); (err != nil) != (unsupported > 0) {
				t.Errorf("Err() = %v; want an error only for unsupported options", err)
			}
		})
	}
}

func notesText(tr *debezium.Translation) string {
	var b strings.Builder
	for _, n := range tr.Notes {
		b.WriteString("  " + n.String() + "\n")
	}
	return b.String()
}

func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestConfigProviders(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets.properties")
	if err := os.WriteFile(secrets, []byte("db.password=from-file\ndb.user: relay\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "host"), []byte("db.internal"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := debezium.Env{
		Getenv:   func(k string) (string, bool) { v, ok := map[string]string{"DB_NAME": "orders"}[k]; return v, ok },
		ReadFile: os.ReadFile,
	}
	tr := translate(t, baseConnector(map[string]string{
		"database.password": "${file:" + secrets + ":db.password}",
		"database.user":     "${file:" + secrets + ":db.user}",
		"database.hostname": "${directory:" + dir + ":host}",
		"database.dbname":   "${env:DB_NAME}",
		// Not a provider reference: no colon.
		"transforms.outbox.route.topic.replacement": "x.${routedByValue}",
	}), env)
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := tr.Setting("postgres.url"); got != "postgres://relay@db.internal:5432/orders" {
		t.Errorf("postgres.url = %v", got)
	}
	y, _ := tr.YAML(true)
	if !strings.Contains(string(y), "relay:from-file@") {
		t.Errorf("the password from the file is not in run's config:\n%s", y)
	}
	if got, _ := tr.Setting("routing.topic_prefix"); got != "x." {
		t.Errorf("routing.topic_prefix = %v", got)
	}

	for _, tc := range []struct{ value, says string }{
		{"${vault:secret/db:password}", `config provider "vault" is not supported`},
		{"${env:NOPE}", "NOPE is not set"},
		{"${file:" + secrets + ":missing}", `no key "missing"`},
	} {
		tr := translate(t, baseConnector(map[string]string{"database.password": tc.value}), env)
		err := tr.Err()
		var oe *debezium.OptionError
		if !errors.As(err, &oe) || oe.Option != "database.password" || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want an error naming database.password saying %q", tc.value, err, tc.says)
		}
	}
}

func TestDebeziumServer(t *testing.T) {
	env := debezium.Env{Getenv: func(k string) (string, bool) {
		v, ok := map[string]string{"PG_PASSWORD": "pw", "KAFKA_BOOTSTRAP": "k1:9092,k2:9092"}[k]
		return v, ok
	}}
	tr := translate(t, `# Debezium Server
debezium.sink.type=kafka
debezium.sink.kafka.producer.bootstrap.servers=${KAFKA_BOOTSTRAP}
debezium.sink.kafka.producer.key.serializer=org.apache.kafka.common.serialization.StringSerializer
debezium.sink.kafka.producer.value.serializer=org.apache.kafka.common.serialization.StringSerializer
debezium.source.connector.class=io.debezium.connector.postgresql.PostgresConnector
debezium.source.database.hostname=${PG_HOST:localhost}
debezium.source.database.user=postgres
debezium.source.database.password=${pg.password}
debezium.source.database.dbname=app
debezium.source.topic.prefix=app
debezium.source.plugin.name=pgoutput
debezium.source.table.include.list=public.outbox
pg.password=${PG_PASSWORD}
debezium.transforms=outbox
debezium.transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
debezium.transforms.outbox.route.topic.replacement=\${routedByValue}.events
debezium.transforms.outbox.table.fields.additional.placement=part:partition
debezium.format.value.schemas.enable=false
debezium.format.header=json
quarkus.log.level=INFO
`, env)
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{
		"postgres.url": "postgres://postgres@localhost:5432/app", "kafka.brokers": []string{"k1:9092", "k2:9092"},
		"routing.key_format": "json+schema", "routing.value_format": "json", "routing.header_format": "json+schema",
		"routing.topic_replacement": "${routedByValue}.events", "kafka.client_id": nil,
	} {
		got, ok := tr.Setting(k)
		if (v == nil && ok) || (v != nil && !reflect.DeepEqual(got, v)) {
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
	y, _ := tr.YAML(true)
	if !strings.Contains(string(y), "postgres:pw@localhost") {
		t.Errorf("the password from the environment is not in run's config:\n%s", y)
	}
	if sev, ok := noteSeverity(tr, "transforms.outbox.table.fields.additional.placement"); !ok || sev != debezium.Warning {
		t.Errorf("no warning that Debezium Server ignores the partition; notes:\n%s", notesText(tr))
	}
	if !hasNote(tr, "quarkus.log.level") || !hasNote(tr, "pg.password") {
		t.Errorf("Server's own keys are not noted:\n%s", notesText(tr))
	}

	bad := translate(t, "debezium.sink.type=pubsub\ndebezium.format.value=avro\ndebezium.source.database.password=${NOPE}\n", env)
	err := bad.Err()
	for _, opt := range []string{"debezium.sink.type", "debezium.format.value", "transforms"} {
		if err == nil || !strings.Contains(err.Error(), opt+":") {
			t.Errorf("Err() does not name %s: %v", opt, err)
		}
	}
	if sev, ok := noteSeverity(bad, "debezium.source.database.password"); !ok || sev != debezium.Warning {
		t.Errorf("an unresolved ${NOPE} is not reported; notes:\n%s", notesText(bad))
	}
}

// The compatibility table of docs/debezium.md is the catalogue's.
func TestDocsCompatibilityTable(t *testing.T) {
	page, err := os.ReadFile("../../../../docs/debezium.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := debezium.CompatibilityTable(); !strings.Contains(string(page), want) {
		t.Errorf("docs/debezium.md's compatibility table is out of date; replace it with the output of `go run ./cmd/outboxrelay debezium compatibility`:\n%s", want)
	}
}

// TestTranslateCurrentDebezium: a connector written for Debezium 3.6,
// with the options 3.2 to 3.6 added or renamed (PostgresConnectorConfig,
// CommonConnectorConfig and EventRouterConfigDefinition at v3.6.0.Final),
// translates to a configuration that runs, and no option of it is taken
// for an unknown one.
func TestTranslateCurrentDebezium(t *testing.T) {
	tr := translate(t, baseConnector(map[string]string{
		"snapshot.mode":                                       "no_data",
		"lsn.flush.mode":                                      "connector_and_driver",
		"lsn.flush.timeout.ms":                                "30000",
		"lsn.flush.timeout.action":                            "fail",
		"offset.mismatch.strategy":                            "trust_slot",
		"publish.via.partition.root":                          "false",
		"extended.headers.enabled":                            "true",
		"guardrail.collections.max":                           "100",
		"guardrail.collections.limit.action":                  "warn",
		"connection.validation.timeout.ms":                    "60000",
		"executor.shutdown.timeout.ms":                        "4000",
		"snapshot.max.threads.multiplier":                     "1",
		"legacy.snapshot.max.threads":                         "false",
		"queue.provider.type":                                 "default",
		"statistics.metrics.enabled":                          "true",
		"transforms.outbox.table.field.additional.missing":    "ignore",
		"transforms.outbox.table.fields.additional.placement": "type:header:eventType",
	}), debezium.Env{})
	if err := tr.Err(); err != nil {
		t.Fatalf("Err() = %v; notes:\n%s", err, notesText(tr))
	}
	for _, n := range tr.Notes {
		if strings.Contains(n.Text, "unknown") {
			t.Errorf("%s is taken for an unknown option: %s", n.Option, n)
		}
	}
	if v, _ := tr.Setting("cdc.snapshot"); v != "never" {
		t.Errorf("cdc.snapshot = %v, want never", v)
	}
	if v, _ := tr.Setting("routing.additional_fields_required"); v != false {
		t.Errorf("routing.additional_fields_required = %v, want false", v)
	}
}
