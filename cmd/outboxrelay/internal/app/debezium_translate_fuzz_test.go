package app_test

import (
	"bytes"
	"errors"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
)

// FuzzTranslate feeds Debezium configuration files (connector JSON, a
// Connect REST listing, connector or Debezium Server properties) to the
// translator. Whatever the file, the translation returns, is the same
// twice, renders YAML that parses, and, when it says the configuration
// can run, what it renders loads as outboxrelay's configuration or is
// refused with an error, never a panic.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte(exampleJSON))
	f.Add([]byte(`{"name": "outbox", "config": {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db", "database.dbname": "app", "database.user": "u", "database.password": "${file:/secrets/db.properties:password}", "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter", "transforms.outbox.table.expand.json.payload": "true", "value.converter": "org.apache.kafka.connect.json.JsonConverter"}}`))
	f.Add([]byte("connector.class=io.debezium.connector.postgresql.PostgresConnector\ndatabase.hostname=db\\\n  .local\ndatabase.password=${env:PGPASS}\ntransforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\ntransforms.outbox.route.topic.regex=(?<x>.*)\n"))
	f.Add([]byte("debezium.sink.type=kafka\ndebezium.sink.kafka.producer.bootstrap.servers=k:9092\ndebezium.source.connector.class=io.debezium.connector.postgresql.PostgresConnector\ndebezium.source.database.hostname=${DB_HOST:db}\ndebezium.transforms=outbox\ndebezium.transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\ndebezium.format.value=avro\n"))
	env := debezium.Env{
		Getenv: func(k string) (string, bool) {
			if k == "PGPASS" || k == "DB_HOST" {
				return "from-env", true
			}
			return "", false
		},
		ReadFile: func(path string) ([]byte, error) {
			if path == "/secrets/db.properties" {
				return []byte("password=from-file\n"), nil
			}
			return nil, errors.New("no such file")
		},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := debezium.ParseFile(data)
		if err != nil {
			return
		}
		tr := debezium.Translate(file, env)
		runnable := tr.Err() == nil
		public, err := tr.YAML(false)
		if err != nil {
			return
		}
		secret, err := tr.YAML(true)
		if err != nil {
			t.Fatalf("YAML(false) rendered but YAML(true) did not: %v", err)
		}
		for _, out := range [][]byte{public, secret} {
			var doc map[string]any
			if err := yaml.Unmarshal(out, &doc); err != nil {
				t.Fatalf("the translation is not YAML: %v\n%s", err, out)
			}
		}
		again, _ := debezium.Translate(file, env).YAML(true)
		if !bytes.Equal(again, secret) {
			t.Fatalf("two translations of one file differ:\n%s\n---\n%s", secret, again)
		}
		// A file a translation names (kafka.tls.ca_file and the like)
		// would be read by the load: not from a fuzzer's paths.
		if runnable && !bytes.Contains(secret, []byte("_file:")) {
			_, _ = config.LoadTranslated(secret, "", []string{"OUTBOXRELAY_KAFKA_BROKERS=kafka:9092"})
		}
	})
}

// An option's name goes into a YAML comment; a control character in it
// (a properties file can write one as \u0007 or \u0000) made YAML that
// did not load, found by FuzzTranslate. A line break in it stays inside
// the comment.
func TestTranslateYAMLOptionNames(t *testing.T) {
	for _, tc := range []struct {
		name, props, want string
	}{
		{name: "NUL", props: "\x00=1\n", want: `\x00`},
		{name: "bell", props: "z\\u0007=1\n", want: `z\a`},
		{name: "carriage return", props: "x\\rkafka\\:\\ {brokers\\: [evil]}=1\n", want: `x\rkafka: {brokers:`},
		{name: "next line", props: "y\\u0085kafka\\:\\ {brokers\\: [evil]}=1\n", want: `y\u0085kafka`},
		{name: "newline", props: "x\\nkafka\\:\\ {brokers\\: [evil]}=1\n", want: "# kafka: {brokers:"},
		{name: "Latin-1, as Java reads properties", props: "a\xffb=1\n", want: "a\u00ffb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := debezium.ParseFile([]byte(tc.props))
			if err != nil {
				t.Fatal(err)
			}
			out, err := debezium.Translate(f, debezium.Env{}).YAML(false)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(out, &doc); err != nil {
				t.Fatalf("the translation does not load: %v\n%s", err, out)
			}
			if _, ok := doc["kafka"]; ok {
				t.Errorf("an option's name wrote a kafka section:\n%s", out)
			}
			if !bytes.Contains(out, []byte(tc.want)) {
				t.Errorf("the notes do not name the option as %q:\n%s", tc.want, out)
			}
		})
	}
}
