package config

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/secret"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const issueExample = `
postgres:
  url: postgres://relay:secret@db:5432/app?sslmode=require
outbox:
  table: public.outbox
source: cdc
cdc:
  slot: outboxrelay
  publication: outboxrelay
kafka:
  brokers: [kafka:9092]
`

func TestLoadIssueExample(t *testing.T) {
	c, err := Load(writeFile(t, issueExample), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.URL != "postgres://relay:secret@db:5432/app?sslmode=require" || c.Outbox.Table != "public.outbox" ||
		c.Source != "cdc" || c.CDC.Slot != "outboxrelay" || strings.Join(c.Kafka.Brokers, ",") != "kafka:9092" {
		t.Fatalf("loaded %+v", c)
	}
}

func TestEnvironmentOverridesFile(t *testing.T) {
	c, err := Load(writeFile(t, issueExample), []string{
		"OUTBOXRELAY_POSTGRES_URL=postgres://other@h/db",
		"OUTBOXRELAY_KAFKA_BROKERS=a:9092, b:9092",
		"OUTBOXRELAY_CDC_STATUS_INTERVAL=2s",
		"OUTBOXRELAY_CDC_CREATE_PUBLICATION=false",
		"OUTBOXRELAY_KAFKA_MAX_BUFFERED_RECORDS=5",
		"OUTBOXRELAY_OUTBOX_COLUMNS_PAYLOAD=body",
		"UNRELATED=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.URL != "postgres://other@h/db" || strings.Join(c.Kafka.Brokers, "|") != "a:9092|b:9092" ||
		c.CDC.StatusInterval != 2*time.Second || c.CDC.CreatePublication == nil || *c.CDC.CreatePublication ||
		c.Kafka.MaxBufferedRecords != 5 || c.Outbox.Columns.Payload != "body" {
		t.Fatalf("loaded %+v", c)
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	_, err := Load(writeFile(t, `
source: cdc
cdc:
  slot: "Bad-Slot"
kafka:
  compression: brotli
log:
  level: loud
`), []string{"OUTBOXRELAY_KAFKA_MAX_BUFFERED_BYTES=lots"})
	if err == nil || !strings.Contains(err.Error(), "OUTBOXRELAY_KAFKA_MAX_BUFFERED_BYTES") {
		t.Fatalf("err %v; want the bad environment variable named", err)
	}
	_, err = Load(writeFile(t, `
source: cdc
cdc:
  slot: "Bad-Slot"
kafka:
  compression: brotli
log:
  level: loud
`), nil)
	for _, want := range []string{"postgres.url is required", `"Bad-Slot" is not a valid slot name`, "at least one broker", `"brotli"`, `log.level: "loud"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v; want it to say %q", err, want)
		}
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	_, err := Load(writeFile(t, issueExample+"kafka_brokers: [x:1]\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "kafka_brokers") {
		t.Fatalf("err %v; want the unknown key named", err)
	}
}

// TestUnknownVariableIsAnError refuses a misspelt OUTBOXRELAY_ variable as
// the file refuses a misspelt key, naming it and the variable it is
// nearest to, among the other problems; it used to be ignored, leaving
// the key it meant at its default.
func TestUnknownVariableIsAnError(t *testing.T) {
	_, err := Load(writeFile(t, issueExample+"log:\n  level: loud\n"), []string{
		"OUTBOXRELAY_SHUTDOWN_TIMOUT=5m",
		"OUTBOXRELAY_KAFKA_DELIVERY_MODE=exactly_once",
		"OUTBOXRELAY_FROBNICATE=1",
	})
	for _, want := range []string{
		"OUTBOXRELAY_SHUTDOWN_TIMOUT: no configuration key has this variable; did you mean OUTBOXRELAY_SHUTDOWN_TIMEOUT?",
		"OUTBOXRELAY_KAFKA_DELIVERY_MODE: no configuration key has this variable; did you mean OUTBOXRELAY_KAFKA_DELIVERY?",
		"OUTBOXRELAY_FROBNICATE: no configuration key has this variable (",
		`log.level: "loud"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v; want it to say %q", err, want)
		}
	}

	// The variables that set no key, read by other parts of the relay and
	// by its tests, are not mistakes.
	if _, err := Load(writeFile(t, "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [kafka:9092]\n"), []string{
		"OUTBOXRELAY_INIT_ADMIN_URL=postgres://postgres@db/app",
		"OUTBOXRELAY_PG_BIN=/usr/lib/postgresql/17/bin",
		"OUTBOXRELAY_TEST_POSTGRES_URL=postgres://t@localhost/t",
		"OUTBOXRELAY_TEST_DOCKER=0",
		"OUTBOXRELAY_TEST_PG=17",
		"OUTBOXRELAY_OUTBOX_TABLES=sales.outbox, billing.outbox",
	}); err != nil {
		t.Errorf("variables that set no key, and outbox.tables: %v", err)
	}
}

// TestRepositoryVariablesAreKnown finds every OUTBOXRELAY_ variable the
// repository's code, docs, manifests and scripts name, so that one added
// outside the configuration (for a command or a test) is added to otherEnv
// too, rather than refused when a user sets it.
func TestRepositoryVariablesAreKnown(t *testing.T) {
	known := map[string]bool{}
	var c Config
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, _ reflect.StructField, _ reflect.Value) {
		known[EnvName(key)] = true
	})
	name := regexp.MustCompile(`OUTBOXRELAY_[A-Z][A-Z0-9_]*`)
	err := filepath.WalkDir("../../../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		// This package's tests misspell variables on purpose.
		if filepath.Dir(path) == filepath.Join("../../../..", "cmd", "outboxrelay", "internal", "config") && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range name.FindAllString(string(b), -1) {
			if !known[v] && !otherEnv[v] && !strings.HasPrefix(v, testEnvPrefix) {
				t.Errorf("%s names %s, which sets no key and is not in otherEnv (env.go): the relay would refuse it", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPasswordNeverInErrors(t *testing.T) {
	_, err := Load(writeFile(t, "postgres:\n  url: \"postgres://u:hunter2@h:bad/db\"\nkafka:\n  brokers: [k:9092]\n"), nil)
	if err == nil {
		t.Fatal("a bad port was accepted")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error shows the password: %v", err)
	}
}

// FuzzParse: whatever a file holds, parsing, defaulting and validating it
// does not panic; and a configuration that validates dumps to YAML that
// shows none of its secrets, parses back, still validates and dumps to the
// same bytes: config-dump shows the configuration the relay runs (secrets
// as xxxxx), which can be loaded again as it is.
//
// Run: go test -run XXX -fuzz FuzzParse$ -fuzztime 10s ./cmd/outboxrelay/internal/config/
func FuzzParse(f *testing.F) {
	f.Add([]byte(issueExample))
	f.Add([]byte("kafka:\n  brokers: [a:1, b:2]\ncdc:\n  status_interval: 1s\n"))
	f.Add([]byte("postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9092]\n"))
	f.Add([]byte("source: poll\npostgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9092]\n  delivery: exactly_once\noutbox:\n  tables: [a.outbox, b.outbox]\npoll:\n  mode: delete\n"))
	f.Add([]byte("postgres:\n  url: postgres://u:o@db/app\nkafka:\n  brokers: [k:9092]\n  sasl: {mechanism: plain, username: u, password: outbox}\n"))
	f.Add([]byte("postgres:\n  url: host=db dbname=app\nkafka:\n  brokers: [k:9092]\noutbox:\n  table: 'we\"ird.out; x'\ncdc:\n  message_prefixes: [outbox]\n  snapshot: initial\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Config
		if Parse(data, &c) != nil {
			return
		}
		c.setDefaults()
		if c.Validate() != nil {
			return
		}
		dump, err := c.Dump()
		if err != nil {
			t.Fatalf("dump a valid configuration: %v", err)
		}
		if scrubbed := secret.NewScrubber(c.Secrets()).Scrub(string(dump)); scrubbed != string(dump) {
			t.Fatalf("the dump shows a secret:\n%s", dump)
		}
		var back Config
		if err := Parse(dump, &back); err != nil {
			t.Fatalf("the dump does not parse: %v\n%s", err, dump)
		}
		back.setDefaults()
		if err := back.Validate(); err != nil {
			t.Fatalf("the dump of a valid configuration does not validate: %v\n%s", err, dump)
		}
		again, err := back.Dump()
		if err != nil {
			t.Fatalf("dump the parsed dump: %v", err)
		}
		if !bytes.Equal(dump, again) {
			t.Fatalf("the dump, parsed back, dumps otherwise:\n%s\n---\n%s", dump, again)
		}
	})
}

func TestOutboxTables(t *testing.T) {
	const base = "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [kafka:9092]\n"
	c, err := Load(writeFile(t, base+"outbox:\n  tables: [sales.outbox, billing.outbox]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cc := c.CDCConfig(); cc.Table != "" || strings.Join(cc.Tables, "|") != "sales.outbox|billing.outbox" {
		t.Errorf("cdc config from outbox.tables: table %q, tables %q", cc.Table, cc.Tables)
	}
	c, err = Load(writeFile(t, base), []string{"OUTBOXRELAY_OUTBOX_TABLES=sales.outbox, billing.outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Outbox.TableNames(), "|") != "sales.outbox|billing.outbox" {
		t.Errorf("outbox.tables from the environment: %q", c.Outbox.TableNames())
	}
	// One table in the list is outbox.table, for every command.
	c, err = Load(writeFile(t, base+"outbox:\n  tables: [sales.outbox]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Outbox.Table != "sales.outbox" || len(c.Outbox.Tables) != 0 {
		t.Errorf("a one-table list: table %q, tables %q", c.Outbox.Table, c.Outbox.Tables)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"outbox:\n  table: public.outbox\n  tables: [a.outbox, b.outbox]\n", "outbox.table (public.outbox) and outbox.tables (a.outbox, b.outbox) are both set"},
		{"outbox:\n  tables: [a.outbox, a.outbox]\n", "a.outbox is listed twice"},
		{"source: poll\noutbox:\n  tables: [a.outbox, b.outbox]\npoll:\n  dead_letter_table: dl\n", "each has its own, <table>_dead_letter"},
	} {
		if _, err := Load(writeFile(t, base+tc.yaml), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.yaml, err, tc.want)
		}
	}
}

func TestOutboxTableOverrides(t *testing.T) {
	const base = "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [kafka:9092]\n"
	c, err := Load(writeFile(t, base+`outbox:
  columns: {payload: body}
  tables:
    - sales.outbox
    - name: billing.outbox
      columns: {aggregateid: account_id}
      routing: {topic_prefix: billing., type_header: eventType}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Outbox.TableNames(), "|"); got != "sales.outbox|billing.outbox" {
		t.Errorf("table names %q", got)
	}
	cols := c.CDCConfig().TableColumns
	if len(cols) != 1 || cols["billing.outbox"].AggregateID != "account_id" || cols["billing.outbox"].Payload != "body" {
		t.Errorf("per-table columns %+v; want billing.outbox's aggregate id account_id over outbox.columns", cols)
	}
	if pcs := c.PollConfigs(); pcs[0].Columns.AggregateID != "aggregateid" || pcs[1].Columns.AggregateID != "account_id" {
		t.Errorf("poll configs' columns %+v, %+v", pcs[0].Columns, pcs[1].Columns)
	}
	rs := c.TableRoutings()
	if len(rs) != 1 || rs["billing.outbox"].TopicPrefix != "billing." || rs["billing.outbox"].TypeHeader != "eventType" {
		t.Errorf("per-table routing %+v", rs)
	}
	dump, err := c.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dump), "- sales.outbox") || !strings.Contains(string(dump), "name: billing.outbox") {
		t.Errorf("config-dump does not write the entries back as given:\n%s", dump)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"outbox:\n  tables:\n    - name: a.outbox\n      colums: {id: x}\n    - b.outbox\n", "field colums not found"},
		{"outbox:\n  tables:\n    - name: a.outbox\n      columns: {id: payload}\n    - b.outbox\n", "a.outbox: outbox.columns: column \"payload\" is mapped as both"},
		{"outbox:\n  tables:\n    - name: a.outbox\n      routing: {topic: \"bad topic\"}\n    - b.outbox\n", "a.outbox: routing"},
		{"outbox:\n  tables:\n    - name: a.outbox\n      routing: {topic_prefix: x.}\n    - b.outbox\nrouting:\n  value_format: json\n", "do not take per table"},
	} {
		if _, err := Load(writeFile(t, base+tc.yaml), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.yaml, err, tc.want)
		}
	}
}

// The poller publishes exactly once under an id prefix per relay, in
// transactions that time out before PostgreSQL ends a frozen claim; what
// would break that ordering is refused.
func TestPollExactlyOnce(t *testing.T) {
	const poll = `
postgres:
  url: %s
source: poll
kafka:
  brokers: [kafka:9092]
  delivery: exactly_once
`
	load := func(url string, env ...string) (*Config, error) {
		return Load(writeFile(t, strings.Replace(poll, "%s", url, 1)), env)
	}
	c, err := load("postgres://relay@db/app")
	if err != nil {
		t.Fatal(err)
	}
	if sc := c.SinkConfig(); sc.TransactionalID != "outboxrelay-poll-app" || sc.TransactionTimeout != 30*time.Second {
		t.Errorf("transactional id %q, timeout %s; want the prefix outboxrelay-poll-app and 30s (under 4 x 30s / 2)", sc.TransactionalID, sc.TransactionTimeout)
	}
	c, err = load("postgres://relay@db/app", "OUTBOXRELAY_POSTGRES_QUERY_TIMEOUT=2s", "OUTBOXRELAY_KAFKA_TRANSACTIONAL_ID=orders")
	if err != nil {
		t.Fatal(err)
	}
	if sc := c.SinkConfig(); sc.TransactionalID != "orders" || sc.TransactionTimeout != 4*time.Second {
		t.Errorf("transactional id %q, timeout %s; want the prefix orders and 4s (half of 4 x 2s)", sc.TransactionalID, sc.TransactionTimeout)
	}
	for name, tc := range map[string]struct {
		url, env, want string
	}{
		"idle timeout in the URL": {url: "postgres://relay@db/app?idle_in_transaction_session_timeout=1000", want: "postgres.url sets idle_in_transaction_session_timeout=1000"},
		"query timeout too short": {url: "postgres://relay@db/app", env: "OUTBOXRELAY_POSTGRES_QUERY_TIMEOUT=400ms", want: "postgres.query_timeout 400ms"},
	} {
		t.Run(name, func(t *testing.T) {
			var env []string
			if tc.env != "" {
				env = append(env, tc.env)
			}
			if _, err := load(tc.url, env...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want it to say %q", err, tc.want)
			}
		})
	}
	// The CDC relay's id is shared by its instances, and its timeout the sink's default.
	c, err = Load(writeFile(t, issueExample), []string{"OUTBOXRELAY_KAFKA_DELIVERY=exactly_once"})
	if err != nil {
		t.Fatal(err)
	}
	if sc := c.SinkConfig(); sc.TransactionalID != "outboxrelay-app-outboxrelay" || sc.TransactionTimeout != 0 {
		t.Errorf("transactional id %q, timeout %s; want outboxrelay-app-outboxrelay and the sink's default", sc.TransactionalID, sc.TransactionTimeout)
	}
}
