package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/poller"
)

// hardPassword has every character that needs escaping somewhere: in a
// URL, in a quoted key=value string, in YAML.
const hardPassword = `p@ss:w/o'r\d "x"?#%&=`

func writeSecret(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSecretFiles(t *testing.T) {
	pwFile := writeSecret(t, "pgpw", hardPassword+"\n")
	for _, tc := range []struct {
		name, yaml string
		env        []string
		wantUser   string
	}{
		{
			name:     "password file added to a URL",
			yaml:     "postgres:\n  url: postgres://relay@db:5432/app?sslmode=verify-full\n  password_file: " + pwFile + "\n",
			wantUser: "relay",
		},
		{
			name:     "password file added to key=value",
			yaml:     "postgres:\n  url: host=db user=relay dbname=app sslmode=verify-full\n  password_file: " + pwFile + "\n",
			wantUser: "relay",
		},
		{
			name:     "url file",
			yaml:     "postgres:\n  url_file: " + writeSecret(t, "url", "postgres://relay:"+strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(hardPassword, "%", "%25"), "@", "%40"), ":", "%3A"), "/", "%2F"), "?", "%3F"), "#", "%23"), " ", "%20"), "&", "%26"), "=", "%3D")+"@db/app\r\n") + "\n",
			wantUser: "relay",
		},
		{
			name:     "password file from the environment",
			yaml:     "postgres:\n  url: postgres://relay@db/app\n",
			env:      []string{"OUTBOXRELAY_POSTGRES_PASSWORD_FILE=" + pwFile},
			wantUser: "relay",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tc.yaml+"kafka:\n  brokers: [k:9092]\n"), tc.env)
			if err != nil {
				t.Fatal(err)
			}
			pc, err := pgconn.ParseConfig(c.Postgres.URL)
			if err != nil {
				t.Fatalf("the resulting connection string does not parse: %v", err)
			}
			if pc.Password != hardPassword || pc.User != tc.wantUser || pc.Host != "db" || pc.Database != "app" {
				t.Fatalf("parsed user %q password %q host %q db %q; want %q, %q, db, app", pc.User, pc.Password, pc.Host, pc.Database, tc.wantUser, hardPassword)
			}
			assertNoSecret(t, c, hardPassword)
		})
	}
}

func TestKafkaSecurityKeys(t *testing.T) {
	saslFile := writeSecret(t, "sasl", "kafka-Secret-1\n")
	c, err := Load(writeFile(t, `
postgres:
  url: postgres://relay@db/app
kafka:
  brokers: [k:9093]
  tls:
    ca_file: /etc/ssl/certs/ca-certificates.crt
    server_name: kafka.internal
  sasl:
    mechanism: scram-sha-512
    username: relay
    password_file: `+saslFile+`
`), []string{"OUTBOXRELAY_KAFKA_TLS_ENABLED=true"})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.SinkConfig()
	if !sc.TLS.Enabled || sc.TLS.ServerName != "kafka.internal" || sc.SASL.Mechanism != "scram-sha-512" || sc.SASL.Username != "relay" || sc.SASL.Password != "kafka-Secret-1" {
		t.Fatalf("sink config %+v", sc)
	}
	assertNoSecret(t, c, "kafka-Secret-1")

	// The environment's password wins over the file's key... and both at
	// once is a mistake worth saying.
	c, err = Load(writeFile(t, "postgres:\n  url: postgres://relay@db/app\nkafka:\n  brokers: [k:9093]\n  sasl:\n    mechanism: scram-sha-256\n    username: relay\n"),
		[]string{"OUTBOXRELAY_KAFKA_SASL_PASSWORD=from-env-Secret"})
	if err != nil {
		t.Fatal(err)
	}
	if c.SinkConfig().SASL.Password != "from-env-Secret" {
		t.Fatalf("environment password not used")
	}
	assertNoSecret(t, c, "from-env-Secret")
}

func TestSecurityMistakes(t *testing.T) {
	pwFile := writeSecret(t, "pw", "hunter2\n")
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "plain sasl without tls",
			yaml: "postgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\n  sasl: {mechanism: plain, username: u, password: hunter2}\n",
			want: []string{"anyone on the network can read it", "kafka.allow_plaintext_sasl"},
		},
		{
			name: "two passwords for postgres",
			yaml: "postgres:\n  url: postgres://u:hunter2@h/d\n  password_file: " + pwFile + "\nkafka:\n  brokers: [k:9092]\n",
			want: []string{"postgres.url has a password too"},
		},
		{
			name: "two passwords in key=value",
			yaml: "postgres:\n  url: host=h password=hunter2\n  password_file: " + pwFile + "\nkafka:\n  brokers: [k:9092]\n",
			want: []string{"postgres.url has a password too"},
		},
		{
			name: "url and url file",
			yaml: "postgres:\n  url: postgres://u@h/d\n  url_file: " + pwFile + "\nkafka:\n  brokers: [k:9092]\n",
			want: []string{"postgres.url and postgres.url_file are both set"},
		},
		{
			name: "two sasl passwords",
			yaml: "postgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\n  sasl: {mechanism: scram-sha-256, username: u, password: hunter2, password_file: " + pwFile + "}\n",
			want: []string{"kafka.sasl.password and kafka.sasl.password_file are both set"},
		},
		{
			name: "missing secret file",
			yaml: "postgres:\n  url: postgres://u@h/d\n  password_file: /nonexistent/pw\nkafka:\n  brokers: [k:9092]\n",
			want: []string{"postgres.password_file: open /nonexistent/pw"},
		},
		{
			name: "device as a secret file",
			yaml: "postgres:\n  url: postgres://u@h/d\n  password_file: /dev/urandom\nkafka:\n  brokers: [k:9092]\n  sasl: {mechanism: scram-sha-256, username: u, password_file: /dev/zero}\n",
			want: []string{"postgres.password_file: /dev/urandom is a character device, not a regular file", "kafka.sasl.password_file: /dev/zero is a character device"},
		},
		{
			name: "directory as a secret file",
			yaml: "postgres:\n  url_file: /\nkafka:\n  brokers: [k:9092]\n",
			want: []string{"postgres.url_file: / is a directory, not a regular file"},
		},
		{
			name: "bad names",
			yaml: "postgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\noutbox:\n  columns:\n    id: \"a\\0b\"\n    payload: \"" + strings.Repeat("p", 64) + "\"\n",
			want: []string{`outbox.columns.id: "a\x00b" contains a NUL byte`, "outbox.columns.payload", "63-byte limit"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.yaml), nil)
			if err == nil {
				t.Fatalf("accepted; want errors saying %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
}

// TestHostileNamesAreValid: quotes, semicolons and spaces are legal in
// PostgreSQL names; they are kept as written and quoted, not refused. The
// sources get each name unchanged, and the SQL made from them (the
// publication the relay creates, the poller's DDL) has, once its quoted
// names, string literals and comments are set aside, the same text as for
// plain names: nothing of a name is left outside its quotes.
func TestHostileNamesAreValid(t *testing.T) {
	const (
		table  = `we"ird.outbox"; DROP TABLE x; --`
		id     = "id'); DROP TABLE x; --"
		pub    = "pub'; DROP TABLE x; --"
		schema = `we"ird`
		name   = `outbox"; DROP TABLE x; --`
	)
	hostile := func(source string) *Config {
		t.Helper()
		c, err := Load(writeFile(t, `
source: `+source+`
postgres:
  url: postgres://u@h/d
kafka:
  brokers: [k:9092]
outbox:
  table: 'we"ird.outbox"; DROP TABLE x; --'
  columns:
    id: "id'); DROP TABLE x; --"
cdc:
  publication: "pub'; DROP TABLE x; --"
`), nil)
		if err != nil {
			t.Fatalf("hostile but legal names refused (source %s): %v", source, err)
		}
		return c
	}
	plain := func(source string) *Config {
		t.Helper()
		c, err := Load(writeFile(t, "source: "+source+"\npostgres:\n  url: postgres://u@h/d\nkafka:\n  brokers: [k:9092]\noutbox:\n  table: s.t\n  columns:\n    id: i\ncdc:\n  publication: p\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	cc := hostile("cdc").CDCConfig()
	if cc.Table != table || cc.Columns.ID != id || cc.Publication != pub {
		t.Errorf("the cdc source gets table %q, id column %q, publication %q; want them as written", cc.Table, cc.Columns.ID, cc.Publication)
	}
	gotSchema, gotName, err := cdc.SplitTable(cc.Table)
	if err != nil || gotSchema != schema || gotName != name {
		t.Errorf("table %q splits into %q and %q (%v), want %q and %q", cc.Table, gotSchema, gotName, err, schema, name)
	}
	publication := func(pub, table string) string {
		s, n, _ := cdc.SplitTable(table)
		return pgsql.CreatePublicationSQL(pub, false, pgident.Quote(s, n))
	}
	pc := plain("cdc").CDCConfig()
	hostileSQL, plainSQL := publication(cc.Publication, cc.Table), publication(pc.Publication, pc.Table)
	if want := `"we""ird"."outbox""; DROP TABLE x; --"`; !strings.Contains(hostileSQL, want) {
		t.Errorf("the publication's SQL does not quote the table as %s:\n%s", want, hostileSQL)
	}
	if a, b := sqlShape(hostileSQL), sqlShape(plainSQL); a != b {
		t.Errorf("the publication's SQL for hostile names has another shape than for plain ones:\n%s\n%s", a, b)
	}

	hp, pp := hostile("poll").PollConfig(), plain("poll").PollConfig()
	if hp.Table != table || hp.Columns.ID != id {
		t.Errorf("the poller gets table %q, id column %q; want them as written", hp.Table, hp.Columns.ID)
	}
	hostileDDL, plainDDL := poller.DDL(hp), poller.DDL(pp)
	for _, want := range []string{`"we""ird"."outbox""; DROP TABLE x; --"`, `"id'); DROP TABLE x; --"`} {
		if !strings.Contains(hostileDDL, want) {
			t.Errorf("the poller's DDL does not quote a name as %s:\n%s", want, hostileDDL)
		}
	}
	if a, b := sqlShape(hostileDDL), sqlShape(plainDDL); a != b {
		t.Errorf("the poller's DDL for hostile names has another shape than for plain ones:\n%s\n---\n%s", a, b)
	}
}

// sqlShape is sql with each quoted identifier written as I, each string
// literal as L and each -- comment dropped: what PostgreSQL parses as
// statements, whatever the names in them. Dollar quotes are kept as they
// are, so a function's body is shaped too.
func sqlShape(sql string) string {
	var b strings.Builder
	for i := 0; i < len(sql); {
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				return b.String()
			}
			i += end
		case strings.HasPrefix(sql[i:], `U&"`):
			b.WriteByte('I')
			i = quotedEnd(sql, i+2, '"')
		case sql[i] == '"':
			b.WriteByte('I')
			i = quotedEnd(sql, i, '"')
		case sql[i] == '\'':
			b.WriteByte('L')
			i = quotedEnd(sql, i, '\'')
		default:
			b.WriteByte(sql[i])
			i++
		}
	}
	return b.String()
}

// quotedEnd is the index after the quoted token that starts at sql[start],
// its quote character q written twice inside it.
func quotedEnd(sql string, start int, q byte) int {
	for i := start + 1; i < len(sql); i++ {
		if sql[i] != q {
			continue
		}
		if i+1 < len(sql) && sql[i+1] == q {
			i++
			continue
		}
		return i + 1
	}
	return len(sql)
}

// assertNoSecret checks that the dump, every way of printing the config
// and a log line carrying it hide secret.
func assertNoSecret(t *testing.T, c *Config, secret string) {
	t.Helper()
	dump, err := c.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dump), redacted) {
		t.Errorf("dump shows no %s where the secret was:\n%s", redacted, dump)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "config", c, "sasl", c.Kafka.SASL)
	for what, s := range map[string]string{
		"dump": string(dump), "%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", *c), "%#v": fmt.Sprintf("%#v", c),
		"sasl %+v": fmt.Sprintf("%+v", c.Kafka.SASL), "log": logged.String(),
	} {
		if strings.Contains(s, secret) {
			t.Errorf("%s shows the secret:\n%s", what, s)
		}
	}
}

func TestDumpIsTheEffectiveConfig(t *testing.T) {
	c, err := Load(writeFile(t, "postgres:\n  url: host=db user=relay password='it\\'s secret' dbname=app\nkafka:\n  brokers: [k:9092]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	dump, err := c.Dump()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"host=db user=relay password=xxxxx dbname=app", "slot: outboxrelay", "status_interval: 10s", "client_id: outboxrelay", "aggregatetype: aggregatetype"} {
		if !strings.Contains(string(dump), want) {
			t.Errorf("dump lacks %q:\n%s", want, dump)
		}
	}
	if strings.Contains(string(dump), "secret") {
		t.Errorf("dump shows the password:\n%s", dump)
	}
	// The dump loads back as the same configuration, secrets aside.
	var back Config
	if err := Parse(dump, &back); err != nil {
		t.Fatalf("dump does not parse back: %v", err)
	}
}

// TestDumpShowsTheDefaults shows the defaults of every section, as
// config-dump's help promises, not only those of cdc and kafka: a minimal
// configuration used to dump shutdown.timeout and the postgres timeouts as
// 0s and routing.topic_prefix as "", none of which the relay runs with.
// Loaded back, a dump is the same configuration, so no filled-in default
// is one the validation refuses.
func TestDumpShowsTheDefaults(t *testing.T) {
	const base = "postgres:\n  url: postgres://relay@db:5432/app\nkafka:\n  brokers: [k:9092]\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"minimal", base, []string{
			"shutdown:\n    timeout: 30s\n",
			"topic_prefix: outbox.event.\n",
			"connect_timeout: 10s\n", "query_timeout: 30s\n", "keepalive: 5s\n", "tcp_user_timeout: 10s\n",
			"checkpoint_topic: outboxrelay.checkpoints\n", "transaction_interval: 100ms\n",
			"receive_timeout: 8s\n", "on_slot_loss: fail\n", "snapshot: never\n",
			"interval: 500ms\n", "batch_size: 1000\n", "mode: mark\n", "dead_letter_table: outbox_dead_letter\n", "buckets: 64\n",
		}},
		{"poll deleting", base + "source: poll\npoll:\n  mode: delete\n", []string{"mode: delete\n", "retention: 0s\n", "claims: 2\n"}},
		{"exactly once", base + "  delivery: exactly_once\n", []string{"transactional_id: outboxrelay-app-outboxrelay\n"}},
		{"several tables", base + "outbox:\n  tables: [a.outbox, b.outbox]\n", []string{"dead_letter_table: \"\"\n"}},
		{"set values kept", base + "shutdown:\n  timeout: 2m\nrouting:\n  topic_prefix: events.\n", []string{"timeout: 2m0s\n", "topic_prefix: events.\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tc.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			dump, err := c.Dump()
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(dump), want) {
					t.Errorf("dump lacks %q:\n%s", want, dump)
				}
			}
			back, err := Load(writeFile(t, string(dump)), nil)
			if err != nil {
				t.Fatalf("the dump does not load back: %v", err)
			}
			if again, _ := back.Dump(); string(again) != string(dump) {
				t.Errorf("the dump loaded back dumps differently:\n%s\nfirst:\n%s", again, dump)
			}
		})
	}
}

func TestScrubSecrets(t *testing.T) {
	const secret = "Tr0ub4dor&3"
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			var h slog.Handler = slog.NewJSONHandler(&buf, nil)
			if format == "text" {
				h = slog.NewTextHandler(&buf, nil)
			}
			log := slog.New(ScrubSecrets(h, []string{secret, ""}))
			err := fmt.Errorf("connect: %w", errors.New("bad DSN postgres://u:"+secret+"@h/d"))
			log.With("dsn", "password="+secret).WithGroup("g").Error("failed with "+secret, "err", err,
				slog.Group("inner", "pw", secret, "n", 3), "value", struct{ P string }{secret})
			out := buf.String()
			if strings.Contains(out, secret) {
				t.Fatalf("log shows the secret:\n%s", out)
			}
			for _, want := range []string{"connect: bad DSN postgres://u:xxxxx@h/d", "failed with xxxxx", "password=xxxxx"} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestDumpHidesEverySecretParameter: sslpassword, the client key's
// passphrase, is hidden as the password is, in both forms of postgres.url,
// and the log scrubber knows it; config-dump used to print it.
func TestDumpHidesEverySecretParameter(t *testing.T) {
	for _, tc := range []struct{ name, url, want string }{
		{"URL", "postgres://relay@db/app?sslmode=require&sslpassword=SEKRET1", "url: postgres://relay@db/app?sslmode=require&sslpassword=xxxxx"},
		{"URL, percent-encoded", "postgres://relay@db/app?sslpassword=SEK%52ET1", "sslpassword=xxxxx"},
		{"keyword/value, quoted", "host=db sslpassword='SEK RET1' dbname=app", "url: host=db sslpassword=xxxxx dbname=app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeFile(t, "postgres:\n  url: \""+tc.url+"\"\nkafka:\n  brokers: [k:9092]\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			dump, err := c.Dump()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(dump), tc.want) {
				t.Errorf("dump lacks %q:\n%s", tc.want, grepLine(string(dump), "url:"))
			}
			for _, s := range []string{"SEKRET1", "SEK RET1", "SEK%52ET1"} {
				assertNoSecret(t, c, s)
			}
			var logged bytes.Buffer
			slog.New(ScrubSecrets(slog.NewTextHandler(&logged, nil), c.Secrets())).Info("connect: " + c.Postgres.URL)
			if strings.Contains(logged.String(), "SEK") {
				t.Errorf("the scrubbed log shows the passphrase: %s", logged.String())
			}
		})
	}
}
