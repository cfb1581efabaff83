package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// runSplit runs the binary with args and returns its stdout and stderr
// apart, and its exit status: what a user pipes into psql is stdout alone.
func runSplit(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v\n%s%s", args, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String(), 0
}

// psqlPath is a psql to run scripts with as a user would, or "" when the
// host has none.
func psqlPath() string {
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return ""
}

// runPsql runs script with psql -v ON_ERROR_STOP=1, as the docs tell a
// user to, and returns its output and whether it succeeded.
func runPsql(t *testing.T, psql, url, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// dbState is what a command that must change nothing could have changed
// in the test's database, and the cluster-wide objects it would create
// under the test's own names.
type dbState struct {
	relations, namespaces, functions, publications int
	victim, role, slot                             bool
}

func readDBState(t *testing.T, conn *pgx.Conn, role, slot string) dbState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s dbState
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'),
		(SELECT count(*) FROM pg_namespace),
		(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')),
		(SELECT count(*) FROM pg_publication),
		to_regclass('public.victim') IS NOT NULL,
		EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $2)`, role, slot).
		Scan(&s.relations, &s.namespaces, &s.functions, &s.publications, &s.victim, &s.role, &s.slot)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBadInputIdentifierNewlineInTable: a line break in outbox.table
// must not pass config loading: it once did, and poll-ddl printed
// the name inside a -- comment, so the rest of the line ran as SQL: init
// --apply dropped a table and exited 0, and psql ran a \! shell command
// from poll-ddl's output. Now config-dump, poll-ddl and init --apply (both
// sources) refuse the name, naming outbox.table and showing the value
// escaped; poll-ddl prints no SQL, so psql runs nothing; and init --apply
// leaves the database as it was.
func TestBadInputIdentifierNewlineInTable(t *testing.T) {
	adminURL := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE TABLE public.victim (id int); INSERT INTO public.victim VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	// A short path: the name, payload and all, must fit in 63 bytes to
	// get as far as the comment.
	dir, err := os.MkdirTemp("", "oi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	marker := filepath.Join(dir, "x")
	psql := psqlPath()

	for _, tc := range []struct{ name, table string }{
		{"line feed then SQL", "public.outbox\nDROP TABLE victim; --"},
		{"carriage return then SQL", "public.outbox\rDROP TABLE victim; --"},
		{"line feed then a psql shell command", "public.outbox\n\\! touch " + marker + " #"},
		{"vertical tab", "public.out\vbox"},
		{"escape sequence", "public.out\x1b[2Jbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role := fmt.Sprintf("relay_%08x", rand.Uint32())
			slot := role
			// A YAML double-quoted scalar takes Go's escapes for these.
			yamlTable := strconv.Quote(tc.table)
			// The escaped value, as an error shows it (%q).
			shown := strconv.Quote(tc.table)
			refused := func(cmd, out string, code int) {
				t.Helper()
				if code == 0 {
					t.Errorf("%s: exit 0; want the table name refused:\n%s", cmd, out)
					return
				}
				if !strings.Contains(out, "outbox.table") || !strings.Contains(out, shown) || !strings.Contains(out, "control character") {
					t.Errorf("%s: exit %d; want an error naming outbox.table, showing %s and the control character:\n%s", cmd, code, shown, out)
				}
				if strings.Contains(out, tc.table) {
					t.Errorf("%s: prints the name raw, line break and all:\n%s", cmd, out)
				}
			}

			for _, source := range []string{"cdc", "poll"} {
				config := fmt.Sprintf("source: %s\npostgres:\n  url: %q\nkafka:\n  brokers: [127.0.0.1:9]\noutbox:\n  table: %s\ncdc:\n  slot: %s\n",
					source, adminURL, yamlTable, slot)
				path := writeTemp(t, "outboxrelay.yaml", config)

				stdout, stderr, code := runSplit(t, nil, "config-dump", "--config", path)
				refused("config-dump (source "+source+")", stdout+stderr, code)

				if source == "poll" {
					stdout, stderr, code = runSplit(t, nil, "poll-ddl", "--config", path)
					refused("poll-ddl", stdout+stderr, code)
					if strings.TrimSpace(stdout) != "" {
						t.Errorf("poll-ddl printed SQL for a name it refuses:\n%s", stdout)
					}
					if psql != "" {
						// What a user would run: whatever poll-ddl printed.
						out, _ := runPsql(t, psql, adminURL, stdout)
						if _, err := os.Stat(marker); err == nil {
							t.Errorf("psql ran a shell command from poll-ddl's output:\n%s\n%s", stdout, out)
						}
					} else {
						t.Log("no psql on this host: poll-ddl's output is not run through psql")
					}
				}

				before := readDBState(t, conn, role, slot)
				stdout, stderr, code = runSplit(t, []string{"OUTBOXRELAY_INIT_ADMIN_URL=" + adminURL},
					"init", "--config", path, "--role", role, "--apply")
				refused("init --apply (source "+source+")", stdout+stderr, code)
				if strings.Contains(stdout, "DROP TABLE") || strings.Contains(stdout, "CREATE") {
					t.Errorf("init --apply (source %s) printed SQL for a name it refuses:\n%s", source, stdout)
				}
				if after := readDBState(t, conn, role, slot); after != before {
					t.Errorf("init --apply (source %s) changed the database: before %+v, after %+v", source, before, after)
				}
				if !readDBState(t, conn, role, slot).victim {
					t.Fatalf("init --apply (source %s) dropped public.victim", source)
				}
			}
		})
	}
}

// TestBadInputIdentifierMultibyteTable: generated names are cut between
// characters:
// with a table named 21 × é (42 bytes), the poller's index names,
// table+_outboxrelay_unpublished and table+_outboxrelay_published, need
// cutting to 63 bytes, and poll-ddl used to cut them inside an é, which
// PostgreSQL (and psql) refuse as invalid UTF-8. Now they are cut between
// characters, and the script poll-ddl prints runs.
func TestBadInputIdentifierMultibyteTable(t *testing.T) {
	url := testenv.Postgres(t)
	table := strings.Repeat("é", 21)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE public.%s (
		id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload jsonb)`,
		pgx.Identifier{table}.Sanitize())); err != nil {
		t.Fatal(err)
	}

	path := writeTemp(t, "outboxrelay.yaml", fmt.Sprintf("source: poll\noutbox:\n  table: public.%s\n", table))
	ddl, stderr, code := runSplit(t, nil, "poll-ddl", "--config", path)
	if code != 0 {
		t.Fatalf("poll-ddl: exit %d:\n%s%s", code, ddl, stderr)
	}
	if !utf8.ValidString(ddl) {
		t.Errorf("poll-ddl printed invalid UTF-8:\n%q", ddl)
	}
	if psql := psqlPath(); psql != "" {
		if out, err := runPsql(t, psql, url, ddl); err != nil {
			t.Fatalf("psql refuses poll-ddl's script: %v\n%s\n%s", err, out, ddl)
		}
	} else {
		t.Log("no psql on this host: running poll-ddl's script with pgx")
		if _, err := conn.Exec(ctx, ddl); err != nil {
			t.Fatalf("PostgreSQL refuses poll-ddl's script: %v\n%s", err, ddl)
		}
	}

	// 63 bytes less the suffix, back to the start of an é.
	want := map[string]bool{
		strings.Repeat("é", 19) + "_outboxrelay_unpublished": false, // 38 + 24 bytes
		strings.Repeat("é", 20) + "_outboxrelay_published":   false, // 40 + 22 bytes
	}
	rows, err := conn.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1`, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, ok := want[n]; ok {
			want[n] = true
		}
	}
	for n, found := range want {
		if !found {
			t.Errorf("no index %q (%d bytes) on the table; it has %q", n, len(n), names)
		}
	}
}
