package testenv_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestPostgresGivesDistinctDatabases(t *testing.T) {
	t.Parallel()
	first, second := testenv.Postgres(t), testenv.Postgres(t)
	if first == second {
		t.Fatalf("Postgres returned %s twice", first)
	}
	a, b := connect(t, first), connect(t, second)

	var nameA, nameB, walLevel string
	if err := a.QueryRow(t.Context(), "SELECT current_database(), current_setting('wal_level')").Scan(&nameA, &walLevel); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(t.Context(), "SELECT current_database()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Errorf("both URLs lead to database %s", nameA)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %s, want logical", walLevel)
	}

	if _, err := a.Exec(t.Context(), "CREATE TABLE only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	var found *string
	if err := b.QueryRow(t.Context(), "SELECT to_regclass('only_in_a')::text").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found != nil {
		t.Errorf("table created in %s is visible in %s", nameA, nameB)
	}
}

// TestPostgresDropsDatabaseWithSlots leaves behind what a failed CDC test
// might: a replication slot streaming to a connection that is still open.
// The cleanup must still drop the slot and the database.
func TestPostgresDropsDatabaseWithSlots(t *testing.T) {
	t.Parallel()
	var dbURL string
	var repl *pgconn.PgConn
	t.Run("leaves a slot in use", func(t *testing.T) {
		dbURL = testenv.Postgres(t)
		conn := connect(t, dbURL)
		if _, err := conn.Exec(t.Context(), "CREATE PUBLICATION pub FOR ALL TABLES"); err != nil {
			t.Fatal(err)
		}
		var err error
		repl, err = pgconn.Connect(t.Context(), dbURL+"&replication=database")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pglogrepl.CreateReplicationSlot(t.Context(), repl, "left_behind", "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pglogrepl.StartReplication(t.Context(), repl, "left_behind", 0,
			pglogrepl.StartReplicationOptions{PluginArgs: []string{"proto_version '1'", "publication_names 'pub'"}}); err != nil {
			t.Fatal(err)
		}
	})
	defer repl.Close(context.Background())

	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := u.Path[1:]
	u.Path = "/postgres"
	admin := connect(t, u.String())
	var databases, slots int
	if err := admin.QueryRow(t.Context(), `
		SELECT (SELECT count(*) FROM pg_database WHERE datname = $1),
		       (SELECT count(*) FROM pg_replication_slots WHERE database = $1)`, dbName).Scan(&databases, &slots); err != nil {
		t.Fatal(err)
	}
	if databases != 0 || slots != 0 {
		t.Errorf("after the test: %d databases and %d slots named %s remain", databases, slots, dbName)
	}
}

func TestPostgresServerIsDedicated(t *testing.T) {
	t.Parallel()
	shared := testenv.Postgres(t)
	srv := testenv.PostgresServer(t)
	if u, _ := url.Parse(shared); u.Port() == fmt.Sprint(srv.Port()) {
		t.Fatalf("PostgresServer returned the shared server on port %d", srv.Port())
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	connect(t, srv.URL("postgres"))
	// The shared server is unaffected.
	connect(t, shared)
}

func TestKafkaProduceConsume(t *testing.T) {
	t.Parallel()
	_, brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	want := []string{"one", "two", "three"}
	for _, v := range want {
		// One key, so one partition, so the order is kept.
		rec := &kgo.Record{Topic: "events", Key: []byte("k"), Value: []byte(v)}
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	got := testenv.Consume(ctx, t, brokers, []string{"events"}, len(want))
	if len(got) != len(want) {
		t.Fatalf("Consume returned %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		if string(r.Value) != want[i] || r.Topic != "events" {
			t.Errorf("record %d: %s %q, want events %q", i, r.Topic, r.Value, want[i])
		}
	}
}

func TestKafkaOptionsOverrideDefaults(t *testing.T) {
	t.Parallel()
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(3))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "auto", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to an auto-created topic: %v", err)
	}
	topics, err := kadm.NewClient(cl).ListTopics(t.Context(), "auto")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(topics["auto"].Partitions); n != 3 {
		t.Errorf("auto-created topic has %d partitions, want 3", n)
	}
}

// TestPostgresServerSkipsMissingMajor: a test asking, through
// OUTBOXRELAY_TEST_PG, for a major this host does not have is skipped with
// the reason, not failed.
func TestPostgresServerSkipsMissingMajor(t *testing.T) {
	t.Setenv(localpg.BinDirEnv, "")
	t.Setenv(localpg.CacheEnv, t.TempDir())
	var major int
	for _, b := range localpg.Builds() {
		if _, err := os.Stat(filepath.Join("/usr/lib/postgresql", strconv.Itoa(b.Major))); err != nil {
			major = b.Major
		}
	}
	if major == 0 {
		t.Skip("every pinned major is also installed under /usr/lib/postgresql")
	}
	t.Setenv(localpg.MajorEnv, strconv.Itoa(major))
	started := false
	var inner testing.TB
	passed := t.Run("asks for a missing major", func(t *testing.T) {
		inner = t
		testenv.PostgresServer(t)
		started = true
	})
	if !passed || started || !inner.Skipped() {
		t.Fatalf("with PostgreSQL %d missing: passed %v, started %v, skipped %v; want a skip", major, passed, started, inner.Skipped())
	}
}
