package check_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/localpg"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	pgPassword   = "Pg-pa55word-in-url"
	saslPassword = "Sasl-pa55word-secret"
)

// setup is one database with an outbox table, a publication and a role,
// and a broker: what `outboxrelay init` would leave, before any change a
// test makes to break it.
type setup struct {
	adminURL string // superuser, on the test database
	admin    *pgx.Conn
	role     string // the relay's role
	brokers  []string
	yaml     map[string]string // extra YAML sections by name, replacing the defaults
}

func newSetup(ctx context.Context, t *testing.T, dbURL string, grants ...string) *setup {
	t.Helper()
	s := &setup{adminURL: dbURL, role: fmt.Sprintf("relay_%08x", rand.Uint32()), yaml: map[string]string{}}
	var err error
	if s.admin, err = pgx.Connect(ctx, dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.admin.Close(context.Background()) })
	s.exec(ctx, t,
		`CREATE TABLE outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`,
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, s.role))
	if grants == nil {
		grants = []string{"REPLICATION", "SELECT", "PUBLICATION"}
	}
	for _, g := range grants {
		switch g {
		case "REPLICATION":
			s.exec(ctx, t, fmt.Sprintf(`ALTER ROLE %s REPLICATION`, s.role))
		case "SELECT":
			s.exec(ctx, t, fmt.Sprintf(`GRANT SELECT ON outbox TO %s`, s.role))
		case "PUBLICATION":
			s.exec(ctx, t, `CREATE PUBLICATION outboxrelay FOR TABLE outbox WITH (publish = 'insert')`)
		}
	}
	_, s.brokers = testenv.Kafka(t)
	return s
}

func (s *setup) exec(ctx context.Context, t *testing.T, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := s.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// config writes the relay's configuration, connecting as the role with a
// password (which the test server, trusting every local login, ignores),
// and loads it as `outboxrelay check` does.
func (s *setup) config(t *testing.T) (*config.Config, string) {
	t.Helper()
	u, err := url.Parse(s.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(s.role, pgPassword)
	sections := map[string]string{
		"postgres": fmt.Sprintf("postgres:\n  url: %q\n", u.String()),
		"kafka":    fmt.Sprintf("kafka:\n  brokers: [%s]\n", strings.Join(s.brokers, ", ")),
		"cdc":      "cdc:\n  create_publication: false\n",
	}
	for k, v := range s.yaml {
		sections[k] = v
	}
	var b strings.Builder
	for _, v := range sections {
		b.WriteString(v)
	}
	path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatalf("load config: %v\n%s", err, b.String())
	}
	return cfg, path
}

// run checks and returns the report and its table.
func run(ctx context.Context, t *testing.T, cfg *config.Config) (*check.Report, string) {
	t.Helper()
	r := check.Run(ctx, cfg, check.WithTimeout(3*time.Second))
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{pgPassword, saslPassword} {
		if strings.Contains(out.String(), secret) || strings.Contains(js.String(), secret) {
			t.Errorf("the report shows a password:\n%s\n%s", out.String(), js.String())
		}
	}
	t.Logf("report:\n%s", out.String())
	return r, out.String()
}

// expect checks that a line of the report has status want, and that its
// detail and fix say what they must.
func expect(t *testing.T, r *check.Report, name string, want check.Status, says ...string) {
	t.Helper()
	res, ok := r.Find(name)
	if !ok {
		t.Errorf("no %q line in the report", name)
		return
	}
	if res.Status != want {
		t.Errorf("%s: %s (%s; fix: %s), want %s", name, res.Status, res.Detail, res.Fix, want)
	}
	if (want == check.Fail || want == check.Warn) && res.Fix == "" {
		t.Errorf("%s: %s without a fix: %s", name, res.Status, res.Detail)
	}
	for _, s := range says {
		if !strings.Contains(res.Detail+" | "+res.Fix, s) {
			t.Errorf("%s: %q / fix %q does not say %q", name, res.Detail, res.Fix, s)
		}
	}
}

func TestHealthySetupPasses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSetup(ctx, t, testenv.Postgres(t))
	s.exec(ctx, t, `SELECT pg_create_logical_replication_slot('outboxrelay', 'pgoutput')`,
		`INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'o-1', 'Created', '{}')`)
	cfg, _ := s.config(t)
	r, _ := run(ctx, t, cfg)
	onlyFailures(t, r)
	expect(t, r, check.CheckPGConnection, check.Pass, "as \""+s.role+"\"")
	expect(t, r, check.CheckPGTLS, check.Pass, "not encrypted", "on this host")
	expect(t, r, check.CheckWalLevel, check.Pass)
	expect(t, r, check.CheckRole, check.Pass, "REPLICATION")
	expect(t, r, check.CheckTable, check.Pass)
	expect(t, r, check.CheckTableGrants, check.Pass)
	expect(t, r, check.CheckColumns, check.Pass)
	expect(t, r, check.CheckPublication, check.Pass, "publishes inserts")
	expect(t, r, check.CheckSlot, check.Pass, "pgoutput", "not in use")
	// Each warning on a line of its own, not inside the slot's PASS.
	expect(t, r, check.CheckSlotWALLimit, check.Warn, "max_slot_wal_keep_size is -1", "without bound")
	expect(t, r, check.CheckSlotFailover, check.Warn, "not a failover slot")
	expect(t, r, check.CheckKafka, check.Pass, "reached 1 broker")
	expect(t, r, check.CheckKafkaTLS, check.Skip)
	expect(t, r, check.CheckKafkaSASL, check.Skip)
	// kfake does not report auto.create.topics.enable, and the topic of the
	// one event is not there yet.
	expect(t, r, check.CheckKafkaTopics, check.Warn, "outbox.event.order", "kafka-topics.sh")
}

// TestMisconfigurations seeds one problem each and checks that the report
// names it with its fix and fails.
func TestMisconfigurations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("wal_level replica", func(t *testing.T) {
		srv, err := localpg.Start(ctx, localpg.Options{Settings: map[string]string{"wal_level": "replica"}})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		dbURL, err := srv.CreateDatabase(ctx, "app")
		if err != nil {
			t.Fatal(err)
		}
		s := newSetup(ctx, t, dbURL)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckWalLevel, check.Fail, `wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL")
		onlyFailures(t, r, check.CheckWalLevel)
	})
	t.Run("missing publication", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "REPLICATION", "SELECT")
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckPublication, check.Fail, `publication "outboxrelay" does not exist`, "cdc.create_publication is false",
			`CREATE PUBLICATION "outboxrelay" FOR TABLE "public"."outbox" WITH (publish = 'insert');`)
		onlyFailures(t, r, check.CheckPublication)
	})
	t.Run("missing publication the role cannot create", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "REPLICATION", "SELECT")
		s.yaml["cdc"] = "cdc:\n  create_publication: true\n"
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckPublication, check.Fail, "cannot create it", "ownership of the table", "CREATE PUBLICATION")
		onlyFailures(t, r, check.CheckPublication)
	})
	t.Run("missing publication the relay will create", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "REPLICATION", "SELECT")
		s.exec(ctx, t, fmt.Sprintf(`ALTER TABLE outbox OWNER TO %s`, s.role), fmt.Sprintf(`GRANT CREATE ON DATABASE %s TO %s`,
			pgx.Identifier{s.admin.Config().Database}.Sanitize(), s.role))
		s.yaml["cdc"] = "cdc:\n  create_publication: true\n"
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckPublication, check.Warn, "the relay will create it")
		onlyFailures(t, r)
	})
	t.Run("publication without the table", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "REPLICATION", "SELECT")
		s.exec(ctx, t, `CREATE TABLE other (n int)`, `CREATE PUBLICATION outboxrelay FOR TABLE other WITH (publish = 'update')`)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckPublication, check.Fail, `does not include "public"."outbox" and does not publish inserts`,
			`ALTER PUBLICATION "outboxrelay" ADD TABLE "public"."outbox";`, `SET (publish = 'insert')`)
	})
	t.Run("partitioned table published by partition", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "REPLICATION", "SELECT")
		s.exec(ctx, t, partitionOutbox(s.role)...)
		s.exec(ctx, t, `CREATE PUBLICATION outboxrelay FOR TABLE outbox WITH (publish = 'insert')`)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckPublication, check.Fail, `sends the rows of partitioned table "public"."outbox" under each partition's name`,
			`ALTER PUBLICATION "outboxrelay" SET (publish_via_partition_root = true);`)
		onlyFailures(t, r, check.CheckPublication)
	})
	t.Run("partitioned table polled", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "SELECT")
		s.exec(ctx, t, partitionOutbox(s.role)...)
		s.yaml["source"] = "source: poll\n"
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckTable, check.Fail, "is partitioned or has inheritance children", "use source: cdc")
	})
	t.Run("missing REPLICATION", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t), "SELECT", "PUBLICATION")
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckRole, check.Fail, "lacks the REPLICATION attribute", fmt.Sprintf(`ALTER ROLE "%s" REPLICATION;`, s.role))
		onlyFailures(t, r, check.CheckRole)
	})
	t.Run("missing SELECT grant", func(t *testing.T) {
		// Logical decoding does not check SELECT: a warning, not a failure.
		s := newSetup(ctx, t, testenv.Postgres(t), "REPLICATION", "PUBLICATION")
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckTableGrants, check.Warn, "lacks SELECT on \"public\".\"outbox\"", "streaming works without it",
			fmt.Sprintf(`GRANT SELECT ON TABLE "public"."outbox" TO "%s";`, s.role))
		onlyFailures(t, r)
	})
	t.Run("missing table and columns", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t))
		s.exec(ctx, t, `CREATE TABLE bare (id uuid, aggregatetype text)`, fmt.Sprintf(`GRANT SELECT ON bare TO %s`, s.role))
		s.yaml["outbox"] = "outbox:\n  table: public.bare\n"
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckColumns, check.Fail, `no column "aggregateid"`, "(the table has aggregatetype, id)", "outbox.columns")
		s.yaml["outbox"] = "outbox:\n  table: public.outbox\nrouting:\n  headers_column: meta\n"
		cfg, _ = s.config(t)
		r, _ = run(ctx, t, cfg)
		expect(t, r, check.CheckColumns, check.Fail, `no column "meta" (routing.headers_column)`, `ALTER TABLE "public"."outbox" ADD COLUMN "meta" jsonb;`)
		s.yaml["outbox"] = "outbox:\n  table: public.nothere\n"
		cfg, _ = s.config(t)
		r, _ = run(ctx, t, cfg)
		expect(t, r, check.CheckTable, check.Fail, `table "public"."nothere" does not exist`, "outboxrelay init")
		expect(t, r, check.CheckColumns, check.Skip)
	})
	t.Run("unreachable broker", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t))
		s.brokers = []string{closedPort(t)}
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafka, check.Fail, "cannot reach the brokers "+s.brokers[0], "check kafka.brokers")
		expect(t, r, check.CheckKafkaTopics, check.Skip)
		onlyFailures(t, r, check.CheckKafka)
	})
	t.Run("unreachable database", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t))
		u, _ := url.Parse(s.adminURL)
		u.Host = closedPort(t)
		s.adminURL = u.String()
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckPGConnection, check.Fail, "nothing listens at "+u.Host)
		expect(t, r, check.CheckWalLevel, check.Skip)
		expect(t, r, check.CheckKafka, check.Pass)
		expect(t, r, check.CheckKafkaTopics, check.Warn, "could not be read")
		onlyFailures(t, r, check.CheckPGConnection)
	})
	t.Run("topics missing without auto-creation", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t))
		_, s.brokers = testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"auto.create.topics.enable": "false"}), kfake.SeedTopics(1, "outbox.event.order"))
		s.exec(ctx, t, `INSERT INTO outbox (aggregatetype, aggregateid, type) VALUES ('order', 'o', 't'), ('invoice', 'i', 't')`)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafkaTopics, check.Fail, "missing topics outbox.event.invoice", "auto.create.topics.enable=false",
			"kafka-topics.sh --bootstrap-server", "--create --topic outbox.event.invoice")
		if res, _ := r.Find(check.CheckKafkaTopics); strings.Contains(res.Detail, "outbox.event.order") {
			t.Error("an existing topic is reported missing")
		}
		onlyFailures(t, r, check.CheckKafkaTopics)
	})
}

// TestSecureBrokers checks the TLS and SASL lines against a broker that
// demands both: a pass with the right settings, a failure with the fix for
// a wrong password.
func TestSecureBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	certs := testenv.NewCerts(t)
	s := newSetup(ctx, t, testenv.Postgres(t))
	_, s.brokers = testenv.Kafka(t, kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "relay", saslPassword))
	pwFile := filepath.Join(t.TempDir(), "sasl")
	for _, tc := range []struct {
		name, password string
		want           check.Status
		says           []string
	}{
		{"right password", saslPassword, check.Pass, []string{`SCRAM-SHA-512 as "relay"`}},
		{"wrong password", "not-" + saslPassword, check.Fail, []string{"SASL credentials", "check kafka.sasl.username"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(pwFile, []byte(tc.password+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s.yaml["kafka"] = fmt.Sprintf("kafka:\n  brokers: [%s]\n  tls: {enabled: true, ca_file: %q}\n  sasl: {mechanism: scram-sha-512, username: relay, password_file: %q}\n",
				strings.Join(s.brokers, ", "), certs.CAFile, pwFile)
			cfg, _ := s.config(t)
			r, out := run(ctx, t, cfg)
			expect(t, r, check.CheckKafkaSASL, tc.want, tc.says...)
			if tc.want == check.Pass {
				expect(t, r, check.CheckKafkaTLS, check.Pass, "the handshake succeeded", certs.CAFile)
				onlyFailures(t, r)
			} else {
				expect(t, r, check.CheckKafkaTLS, check.Pass, "the handshake succeeded")
				onlyFailures(t, r, check.CheckKafka, check.CheckKafkaSASL)
			}
			if strings.Contains(out, tc.password) {
				t.Error("the report shows the password")
			}
		})
	}
}

// onlyFailures checks that the report fails exactly the named checks, so a
// seeded problem is reported where it is and nowhere else.
func onlyFailures(t *testing.T, r *check.Report, names ...string) {
	t.Helper()
	var failed []string
	for _, res := range r.Results {
		if res.Status == check.Fail {
			failed = append(failed, res.Check)
		}
	}
	if strings.Join(failed, ", ") != strings.Join(names, ", ") {
		t.Errorf("failed checks: [%s]; want [%s]", strings.Join(failed, ", "), strings.Join(names, ", "))
	}
	if r.Failed() != (len(names) > 0) {
		t.Errorf("Failed() = %v with failures %v", r.Failed(), names)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestPollSource checks a table readied for source: poll, then with a
// grant the poller needs taken away.
// partitionOutbox is the SQL that makes the outbox table a partitioned one,
// readable by role.
func partitionOutbox(role string) []string {
	return []string{`DROP TABLE outbox`,
		`CREATE TABLE outbox (id uuid NOT NULL, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL,
			type varchar(255) NOT NULL, payload jsonb) PARTITION BY LIST (aggregatetype)`,
		`CREATE TABLE outbox_default PARTITION OF outbox DEFAULT`,
		fmt.Sprintf(`GRANT SELECT ON outbox TO %s`, role)}
}

func TestPollSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSetup(ctx, t, testenv.Postgres(t), "SELECT")
	s.yaml["source"] = "source: poll\n"
	cfg, _ := s.config(t)
	pc := cfg.PollConfig()
	pc.SetDefaults()
	s.exec(ctx, t, poller.DDL(pc), fmt.Sprintf(`GRANT UPDATE, DELETE ON outbox TO %s`, s.role),
		fmt.Sprintf(`GRANT INSERT ON outbox_dead_letter TO %s`, s.role))
	r, _ := run(ctx, t, cfg)
	onlyFailures(t, r)
	expect(t, r, check.CheckTableGrants, check.Pass, "SELECT, UPDATE and DELETE")
	expect(t, r, check.CheckColumns, check.Pass)
	expect(t, r, check.CheckDeadLetter, check.Pass)
	expect(t, r, check.CheckTrigger, check.Pass)
	if _, ok := r.Find(check.CheckWalLevel); ok {
		t.Error("source poll is checked for wal_level, which it does not need")
	}

	s.exec(ctx, t, fmt.Sprintf(`REVOKE UPDATE ON outbox FROM %s`, s.role), fmt.Sprintf(`REVOKE INSERT ON outbox_dead_letter FROM %s`, s.role),
		`DROP TRIGGER outboxrelay_notify ON outbox`)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckTableGrants, check.Fail, "lacks UPDATE on", fmt.Sprintf(`GRANT UPDATE ON TABLE "public"."outbox" TO "%s";`, s.role))
	expect(t, r, check.CheckDeadLetter, check.Fail, "lacks INSERT", fmt.Sprintf(`GRANT INSERT ON TABLE "public"."outbox_dead_letter" TO "%s";`, s.role))
	expect(t, r, check.CheckTrigger, check.Warn, "poll.interval")
	onlyFailures(t, r, check.CheckTableGrants, check.CheckDeadLetter)
}

// TestPostgresTLS turns on TLS on a server of its own and checks what the
// report says for sslmode verify-full (verified), require (encrypted, not
// verified) and verify-full with the wrong CA (no connection, and the fix);
// then the relay streams through a verify-full connection, replication
// included.
func TestPostgresTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testenv.PostgresServer(t)
	certs := testenv.NewCerts(t)
	enableTLS(ctx, t, srv, certs)
	dbURL, err := srv.CreateDatabase(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	s := newSetup(ctx, t, dbURL)
	s.exec(ctx, t, `SELECT pg_create_logical_replication_slot('outboxrelay', 'pgoutput')`)
	withSSL := func(query string) {
		u, _ := url.Parse(dbURL)
		u.RawQuery = query
		s.adminURL = u.String()
	}

	withSSL("sslmode=verify-full&sslrootcert=" + url.QueryEscape(certs.CAFile))
	cfg, _ := s.config(t)
	r, _ := run(ctx, t, cfg)
	expect(t, r, check.CheckPGTLS, check.Pass, "encrypted (TLSv1.3", "sslmode=verify-full")
	onlyFailures(t, r)

	src, err := cdc.New(cfg.CDCConfig())
	if err != nil {
		t.Fatal(err)
	}
	snk, err := sink.New(cfg.SinkConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	runner, err := connector.NewRunner(src, snk, cfg.RunnerConfig())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(runCtx) }()
	s.exec(ctx, t, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'o-1', 'Created', '{"tls": true}')`)
	if recs := testenv.Consume(ctx, t, s.brokers, []string{"outbox.event.order"}, 1); string(recs[0].Value) != `{"tls": true}` {
		t.Errorf("relayed %q", recs[0].Value)
	}
	var encrypted bool
	if err := s.admin.QueryRow(ctx, `SELECT bool_and(ssl) FROM pg_stat_ssl JOIN pg_stat_replication USING (pid)`).Scan(&encrypted); err != nil || !encrypted {
		t.Errorf("the replication connection is not encrypted (%v)", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("relay: %v", err)
	}

	withSSL("sslmode=require")
	cfg, _ = s.config(t)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckPGTLS, check.Warn, "not verified (sslmode=require)", "sslmode=verify-full and sslrootcert")

	withSSL("sslmode=verify-full&sslrootcert=" + url.QueryEscape(testenv.NewCerts(t).CAFile))
	cfg, _ = s.config(t)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckPGConnection, check.Fail, "certificate signed by unknown authority", "set sslrootcert=<CA file>")
}

// enableTLS gives the server the test CA's server certificate and turns
// ssl on, which a reload does.
func enableTLS(ctx context.Context, t *testing.T, srv *localpg.Server, certs *testenv.Certs) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(srv.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	// The server runs as the owner of its directory and reads its key only
	// when it alone may read it.
	paths := map[string]string{}
	for name, from := range map[string]string{"server.crt": certs.ServerCert, "server.key": certs.ServerKey} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(srv.Dir(), name)
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(to, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
		paths[name] = to
	}
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		fmt.Sprintf(`ALTER SYSTEM SET ssl_cert_file = '%s'`, paths["server.crt"]),
		fmt.Sprintf(`ALTER SYSTEM SET ssl_key_file = '%s'`, paths["server.key"]),
		`ALTER SYSTEM SET ssl = on`,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The reload is asynchronous: wait until the server offers TLS.
	u, _ := url.Parse(srv.URL("postgres"))
	u.RawQuery = "sslmode=require"
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(ctx, u.String())
		if err == nil {
			c.Close(ctx)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not offer TLS after the reload: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
