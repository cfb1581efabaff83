package app_test

import (
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
)

// TestTranslateHidesSecrets: the client key's passphrase
// (database.sslpassword) is a secret as database.password is, left out of
// the printed translation and used by run; a registry URL that does not
// parse is shown with its password masked and refused with a note, where
// it used to be printed as it was.
func TestTranslateHidesSecrets(t *testing.T) {
	const conn = `{"name": "c", "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "db", "database.dbname": "app", "database.user": "u",
    "database.password": "PWSEKRET", "database.sslmode": "require", "database.sslpassword": "SEKRET1",
    "topic.prefix": "p", "plugin.name": "pgoutput", "table.include.list": "public.outbox",
    "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter"%s}}`
	for _, tc := range []struct {
		name, extra string
		secrets     []string
		note        string // a note that must be there, "" for none
	}{
		{"sslpassword", "", []string{"PWSEKRET", "SEKRET1"}, "database.sslpassword (info): used by run --debezium-config"},
		{"unparsable registry URL", `, "value.converter": "io.confluent.connect.avro.AvroConverter", "value.converter.schema.registry.url": "https://reg:SEKRET2%zz@registry:8081"`,
			[]string{"PWSEKRET", "SEKRET1", "SEKRET2"}, `value.converter.schema.registry.url (unsupported): "https://reg:xxxxx@registry:8081" is not a valid URL`},
		{"registry URLs that differ", `, "key.converter": "io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url": "https://reg:SEKRET3@a:8081", "value.converter": "io.confluent.connect.avro.AvroConverter", "value.converter.schema.registry.url": "https://reg:SEKRET2%zz@b:8081"`,
			[]string{"PWSEKRET", "SEKRET1", "SEKRET2", "SEKRET3"}, `differs from key.converter.schema.registry.url's "https://reg:xxxxx@a:8081"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, strings.Replace(conn, "%s", tc.extra, 1), debezium.Env{})
			public, err := tr.YAML(false)
			if err != nil {
				t.Fatal(err)
			}
			out := string(public)
			if e := tr.Err(); e != nil {
				out += "\n" + e.Error()
			}
			for _, s := range tc.secrets {
				if strings.Contains(out, s) {
					t.Errorf("translate shows %s:\n%s", s, out)
				}
			}
			if tc.note != "" && !strings.Contains(out, tc.note) {
				t.Errorf("translate lacks the note %q:\n%s", tc.note, out)
			}
		})
	}

	// run --debezium-config uses both secrets.
	tr := translate(t, strings.Replace(conn, "%s", "", 1), debezium.Env{})
	full, err := tr.YAML(true)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadTranslated(full, "", []string{"OUTBOXRELAY_KAFKA_BROKERS=kafka:9092"})
	if err != nil {
		t.Fatalf("the translated YAML does not load: %v", err)
	}
	if u := cfg.Postgres.URL; !strings.Contains(u, "u:PWSEKRET@db") || !strings.Contains(u, "sslpassword=SEKRET1") || !strings.Contains(u, "sslmode=require") {
		t.Errorf("run's postgres.url %q lacks the password, sslpassword or sslmode", u)
	}
}
