package initsql_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/initsql"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/localpg"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const rolePassword = "Relay-pa55word!"

// requirePasswords makes every role but the superuser log in with a
// SCRAM-SHA-256 password over TCP, so that the role's password is really
// checked.
func requirePasswords(ctx context.Context, t *testing.T, srv *localpg.Server) {
	t.Helper()
	hba := filepath.Join(srv.Dir(), "data", "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	rules := "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, append([]byte(rules), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
}

// roleURL is the URL of database db on srv as role with password.
func roleURL(srv *localpg.Server, role, password, db string) string {
	u, _ := url.Parse(srv.URL(db))
	u.User = url.UserPassword(role, password)
	return u.String()
}

// TestApplyLetsTheRoleRelay applies the script for ordinary and for hostile
// names (quotes, semicolons, backslashes, with standard_conforming_strings
// off), twice, on a server that checks passwords, then relays events as the
// new role: it has what it needs, and the hostile names harmed nothing.
func TestApplyLetsTheRoleRelay(t *testing.T) {
	srv := testenv.PostgresServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	requirePasswords(ctx, t, srv)

	for _, tc := range []struct {
		name                          string
		db, schema, table, pub, role  string
		slot                          string
		columns                       connector.ColumnMap
		nonStandardStrings, createTbl bool
	}{
		{name: "plain names", db: "app", schema: "public", table: "outbox", pub: "outboxrelay", role: "relay", slot: "relay_slot"},
		{
			name: "hostile names", db: `app"; DROP TABLE x; --`, schema: `s"; DROP TABLE x; --`,
			table: `outbox"; DROP TABLE x; --`, pub: `pub'; DROP TABLE x; --`, role: `relay'"; DROP TABLE x; --`, slot: "hostile_slot",
			columns: connector.ColumnMap{ID: `id"); DROP TABLE x; --`, AggregateType: `at'); DROP TABLE x; --`, AggregateID: "aggregate id", Payload: `$outboxrelay$`},
		},
		{
			name: "backslashes without standard strings", db: "app2", schema: "public", table: `out\box`,
			pub: `pub\'; DROP TABLE x; --`, role: `relay\'; DROP TABLE x; --`, slot: "backslash_slot", nonStandardStrings: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbURL, err := srv.CreateDatabase(ctx, tc.db)
			if err != nil {
				t.Fatal(err)
			}
			admin, err := pgx.Connect(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close(ctx)
			if _, err := admin.Exec(ctx, `CREATE TABLE x (n int); INSERT INTO x VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			if tc.nonStandardStrings {
				if _, err := admin.Exec(ctx, `SET standard_conforming_strings = off`); err != nil {
					t.Fatal(err)
				}
			}
			verifier, err := initsql.ScramVerifier(rolePassword)
			if err != nil {
				t.Fatal(err)
			}
			script, err := initsql.Build(initsql.Options{
				Source: "cdc", Schema: tc.schema, Table: tc.table, Columns: tc.columns, Database: tc.db,
				Role: tc.role, RoleVerifier: verifier, Publication: tc.pub, Slot: tc.slot,
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(script.String(), rolePassword) {
				t.Fatalf("the script shows the password:\n%s", script)
			}
			for range 2 { // idempotent
				if err := initsql.Apply(ctx, admin, script); err != nil {
					t.Fatalf("apply: %v\n%s", err, script)
				}
			}
			var survived int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM x`).Scan(&survived); err != nil || survived != 1 {
				t.Fatalf("table x: %d rows, %v; the hostile names ran as SQL", survived, err)
			}
			var super, repl bool
			if err := admin.QueryRow(ctx, `SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = $1`, tc.role).Scan(&super, &repl); err != nil || super || !repl {
				t.Fatalf("role %q: superuser %v, replication %v, %v; want a REPLICATION role that is not a superuser", tc.role, super, repl, err)
			}

			// A wrong password is refused: the server checks them.
			if c, err := pgx.Connect(ctx, roleURL(srv, tc.role, "wrong", tc.db)); err == nil {
				c.Close(ctx)
				t.Fatal("a wrong password was accepted; the test server does not check passwords")
			}
			// The role relays what the application writes.
			src, err := cdc.New(cdc.Config{
				URL: roleURL(srv, tc.role, rolePassword, tc.db), Table: tc.schema + "." + tc.table, Columns: tc.columns,
				Slot: tc.slot, Publication: tc.pub, CreatePublication: new(bool),
			})
			if err != nil {
				t.Fatal(err)
			}
			relayEvents(ctx, t, admin, tc.schema, tc.table, tc.columns, src)
		})
	}
}

// relayEvents inserts events as the admin, relays them from src to a fresh
// broker, and checks they all arrive.
func relayEvents(ctx context.Context, t *testing.T, admin *pgx.Conn, schema, table string, m connector.ColumnMap, src connector.Source) {
	t.Helper()
	m = m.WithDefaults()
	insert := fmt.Sprintf(`INSERT INTO %s (%s, %s, %s, %s) VALUES ('order', $1, 'Created', '{"n": 1}')`,
		pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{m.AggregateType}.Sanitize(), pgx.Identifier{m.AggregateID}.Sanitize(),
		pgx.Identifier{m.Type}.Sanitize(), pgx.Identifier{m.Payload}.Sanitize())

	_, brokers := testenv.Kafka(t)
	snk, err := sink.New(sink.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	r, err := connector.NewRunner(src, snk, connector.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	const n = 5
	for i := range n {
		if _, err := admin.Exec(ctx, insert, fmt.Sprintf("agg-%d", i)); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	consumeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	recs := testenv.Consume(consumeCtx, t, brokers, []string{"outbox.event.order"}, n)
	for i, r := range recs {
		if string(r.Value) != `{"n": 1}` {
			t.Errorf("record %d: value %q", i, r.Value)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("relay stopped: %v", err)
	default:
	}
}

// TestApplyPollLetsTheRoleRelay applies the script for source: poll, with
// the poller's own DDL, and relays as the new role: a role with no
// REPLICATION, which may read, mark and delete outbox rows and insert dead
// letters.
func TestApplyPollLetsTheRoleRelay(t *testing.T) {
	srv := testenv.PostgresServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	requirePasswords(ctx, t, srv)
	dbURL, err := srv.CreateDatabase(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	const role, schema, table = `poll'"er`, "events", `out"box`
	pcfg := poller.Config{URL: roleURL(srv, role, rolePassword, "app"), Table: schema + "." + table, Interval: 50 * time.Millisecond}
	pcfg.SetDefaults()
	verifier, err := initsql.ScramVerifier(rolePassword)
	if err != nil {
		t.Fatal(err)
	}
	script, err := initsql.Build(initsql.Options{
		Source: "poll", Schema: schema, Table: table, Database: "app", Role: role, RoleVerifier: verifier,
		PollerDDL: poller.DDL(pcfg), DeadLetterSchema: schema, DeadLetterTable: pcfg.DeadLetterTable,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := initsql.Apply(ctx, admin, script); err != nil {
			t.Fatalf("apply: %v\n%s", err, script)
		}
	}
	var repl, upd, del, ins bool
	err = admin.QueryRow(ctx, `SELECT rolreplication,
		has_table_privilege($1, $2::regclass, 'UPDATE'), has_table_privilege($1, $2::regclass, 'DELETE'),
		has_table_privilege($1, $3::regclass, 'INSERT')
		FROM pg_roles WHERE rolname = $1`, role, pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{schema, pcfg.DeadLetterTable}.Sanitize()).Scan(&repl, &upd, &del, &ins)
	if err != nil || repl || !upd || !del || !ins {
		t.Fatalf("role: replication %v, update %v, delete %v, insert into dead letters %v, %v; want no replication and the three grants", repl, upd, del, ins, err)
	}
	src, err := poller.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	relayEvents(ctx, t, admin, schema, table, connector.ColumnMap{}, src)
}

func TestScramVerifierRefusesNonASCII(t *testing.T) {
	if _, err := initsql.ScramVerifier("pässword"); err == nil || !strings.Contains(err.Error(), `\password`) {
		t.Fatalf("err %v; want a refusal that says to use \\password", err)
	}
	if _, err := initsql.ScramVerifier(""); err == nil {
		t.Fatal("an empty password was accepted")
	}
	a, _ := initsql.ScramVerifier("same")
	b, _ := initsql.ScramVerifier("same")
	if a == b || !strings.HasPrefix(a, "SCRAM-SHA-256$4096:") {
		t.Fatalf("verifiers %q and %q: want a fresh salt each time, in PostgreSQL's format", a, b)
	}
}

func TestBuildRefusesBadNames(t *testing.T) {
	_, err := initsql.Build(initsql.Options{Source: "cdc", Schema: "public", Table: "a\x00b", Database: "d", Role: strings.Repeat("r", 64), Publication: ""})
	for _, want := range []string{"contains a NUL byte", "63-byte limit", "the publication is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v; want it to say %q", err, want)
		}
	}
}

// TestBuildRefusesLineBreaks: the database and the role are printed in the
// script's header comment; a name with a line break would end it, and
// psql would run the rest of the line.
func TestBuildRefusesLineBreaks(t *testing.T) {
	_, err := initsql.Build(initsql.Options{Source: "poll", Schema: "public", Table: "out\rbox", Database: "d\n\\! ls",
		Role: "relay\nDROP TABLE x; --", PollerDDL: "SELECT 1;", DeadLetterSchema: "public", DeadLetterTable: "dl\x1b"})
	for _, want := range []string{
		`the outbox table "out\rbox" contains a control character (a carriage return`,
		`the database "d\n\\! ls" contains a control character (a line feed`,
		`the role "relay\nDROP TABLE x; --" contains a control character`,
		`the dead-letter table "dl\x1b" contains a control character (an escape`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v; want it to say %q", err, want)
		}
	}
}

// TestBuildCleanupGrantsDelete: with cdc.cleanup the cdc role may delete
// from the table; without it, it only reads.
func TestBuildCleanupGrantsDelete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cleanup bool
		want    string
	}{
		{"cleanup", true, `GRANT SELECT, DELETE ON TABLE "public"."outbox" TO "relay";`},
		{"no cleanup", false, `GRANT SELECT ON TABLE "public"."outbox" TO "relay";`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := initsql.Build(initsql.Options{Source: "cdc", Schema: "public", Table: "outbox", Database: "d", Role: "relay",
				Publication: "outboxrelay", Cleanup: tc.cleanup})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(s.String(), tc.want) {
				t.Errorf("the script lacks %s:\n%s", tc.want, s)
			}
		})
	}
}

// TestBuildHeadersColumn: without routing.headers_column the table is
// Debezium's five columns, and the script says how to add a headers
// column; with it, the table has the column, and a table made without it
// gets it.
func TestBuildHeadersColumn(t *testing.T) {
	opts := initsql.Options{Source: "cdc", Schema: "public", Table: "outbox", Database: "d", Role: "relay", Publication: "outboxrelay"}
	s, err := initsql.Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), `"headers"`) || !strings.Contains(s.String(), "set\n-- routing.headers_column: headers and run init again, which adds it.") {
		t.Errorf("without routing.headers_column, want the five columns and a word on how to add headers:\n%s", s)
	}
	opts.HeadersColumn = "headers"
	if s, err = initsql.Build(opts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  \"payload\"       jsonb,\n  \"headers\"       jsonb\n);",
		`ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "headers" jsonb;`,
	} {
		if !strings.Contains(s.String(), want) {
			t.Errorf("with routing.headers_column, the script lacks %q:\n%s", want, s)
		}
	}
	opts.HeadersColumn = "payload"
	if _, err := initsql.Build(opts); err == nil || !strings.Contains(err.Error(), `routing.headers_column "payload" is one of outbox.columns`) {
		t.Errorf("err %v; want one refusing a headers column that is the payload's", err)
	}
}

// TestApplyAddsTheHeadersColumn: applied to the five-column table the
// README documents, already holding a row, the script with
// routing.headers_column adds the column, and applied again changes
// nothing.
func TestApplyAddsTheHeadersColumn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "The outbox table is Debezium's:\n\n```sql\n")
	if table, _, _ = strings.Cut(table, "```"); !ok || !strings.HasPrefix(table, "CREATE TABLE public.outbox (") {
		t.Fatalf("README.md has no CREATE TABLE public.outbox block after \"The outbox table is Debezium's:\"")
	}
	if _, err := conn.Exec(ctx, table+`; INSERT INTO public.outbox VALUES (gen_random_uuid(), 'order', '1', 'Placed', '{}')`); err != nil {
		t.Fatal(err)
	}
	db := conn.Config().Database
	script, err := initsql.Build(initsql.Options{Source: "cdc", Schema: "public", Table: "outbox", HeadersColumn: "headers",
		Database: db, Role: "relay_" + db, Publication: "pub_" + db})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := initsql.Apply(ctx, conn, script); err != nil {
			t.Fatalf("apply: %v\n%s", err, script)
		}
	}
	var typ string
	var rows int
	if err := conn.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), (SELECT count(*) FROM public.outbox)
		FROM pg_attribute WHERE attrelid = 'public.outbox'::regclass AND attname = 'headers'`).Scan(&typ, &rows); err != nil || typ != "jsonb" || rows != 1 {
		t.Fatalf("the headers column: type %q, the table's rows %d, %v; want jsonb beside the row there was", typ, rows, err)
	}
}
