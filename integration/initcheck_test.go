package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// runCommand runs the binary with args and returns its output (stdout and
// stderr) and exit status.
func runCommand(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v\n%s", args, err, out)
	}
	return string(out), 0
}

// TestInitApplyThenCheck is the operator's path with the binary: init
// --apply sets up a fresh database for a new least-privilege role, check
// then passes (exit 0); a publication dropped afterwards makes check fail
// (exit 1) with the fix; no command prints the role's password.
func TestInitApplyThenCheck(t *testing.T) {
	adminURL := testenv.Postgres(t)
	_, brokers := testenv.Kafka(t)
	const password = "Init-Check-pa55word"
	role := fmt.Sprintf("relay_%08x", rand.Uint32())
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	config := fmt.Sprintf("postgres:\n  url: %q\nkafka:\n  brokers: [%s]\ncdc:\n  slot: %s\n  create_publication: false\n",
		u.String(), strings.Join(brokers, ", "), role)
	path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	noPassword := func(what, out string) {
		t.Helper()
		if strings.Contains(out, password) {
			t.Errorf("%s shows the password:\n%s", what, out)
		}
	}

	out, code := runCommand(t, nil, "init", "--config", path)
	noPassword("init", out)
	if code != 0 || !strings.Contains(out, `CREATE PUBLICATION "outboxrelay"`) || !strings.Contains(out, "SCRAM-SHA-256$4096:") {
		t.Fatalf("init: exit %d; want the SQL with the publication and a password verifier:\n%s", code, out)
	}
	out, code = runCommand(t, []string{"OUTBOXRELAY_INIT_ADMIN_URL=" + adminURL}, "init", "--config", path, "--apply")
	noPassword("init --apply", out)
	if code != 0 || !strings.Contains(out, "applied to database") {
		t.Fatalf("init --apply: exit %d:\n%s", code, out)
	}

	out, code = runCommand(t, nil, "check", "--config", path)
	noPassword("check", out)
	if code != 0 || strings.Contains(out, "FAIL") || !strings.Contains(out, "PASS    role privileges") || !strings.Contains(out, "PASS    replication slot") {
		t.Fatalf("check after init: exit %d; want every line to pass (warnings aside):\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `DROP PUBLICATION outboxrelay`); err != nil {
		t.Fatal(err)
	}
	out, code = runCommand(t, nil, "check", "--config", path)
	noPassword("check", out)
	if code != 1 || !strings.Contains(out, "FAIL    publication") || !strings.Contains(out, `fix: as the table's owner: CREATE PUBLICATION "outboxrelay"`) ||
		!strings.Contains(out, "check failed") {
		t.Fatalf("check without the publication: exit %d; want 1 with the failure and its fix:\n%s", code, out)
	}

	out, code = runCommand(t, nil, "config-dump", "--config", path)
	noPassword("config-dump", out)
	if code != 0 || !strings.Contains(out, role+":xxxxx@") {
		t.Fatalf("config-dump: exit %d; want the URL with its password hidden:\n%s", code, out)
	}
}

// init and check with two outbox tables (outbox.tables): init readies
// both, with one publication, role and slot; check reports on each table,
// and a table missing from the publication fails its report alone; the
// relay then relays both.
func TestInitCheckSeveralTables(t *testing.T) {
	adminURL := testenv.Postgres(t)
	_, brokers := testenv.Kafka(t)
	role := fmt.Sprintf("relay_%08x", rand.Uint32())
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "Several-tables-pa55")
	config := fmt.Sprintf("postgres:\n  url: %q\nkafka:\n  brokers: [%s]\noutbox:\n  tables: [sales.outbox, billing.outbox]\ncdc:\n  slot: %s\n  create_publication: false\nhttp:\n  listen: 127.0.0.1:0\nlog:\n  format: text\n",
		u.String(), strings.Join(brokers, ", "), role)
	path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCommand(t, []string{"OUTBOXRELAY_INIT_ADMIN_URL=" + adminURL}, "init", "--config", path, "--apply")
	if code != 0 || strings.Count(out, "pg_create_logical_replication_slot") != 1 || strings.Count(out, "CREATE ROLE") != 1 {
		t.Fatalf("init --apply: exit %d; want one slot and one role for both tables:\n%s", code, out)
	}
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "sales"."outbox"`, `CREATE TABLE IF NOT EXISTS "billing"."outbox"`, `ALTER PUBLICATION "outboxrelay" ADD TABLE "billing"."outbox"`} {
		if !strings.Contains(out, want) {
			t.Errorf("init does not say %s:\n%s", want, out)
		}
	}
	out, code = runCommand(t, nil, "check", "--config", path)
	if code != 0 || strings.Contains(out, "FAIL") || !strings.Contains(out, "table sales.outbox") || !strings.Contains(out, "table billing.outbox") {
		t.Fatalf("check after init: exit %d; want a passing report for each table:\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := connectPool(t, adminURL)
	if _, err := pool.Exec(ctx, `ALTER PUBLICATION outboxrelay DROP TABLE billing.outbox`); err != nil {
		t.Fatal(err)
	}
	out, code = runCommand(t, nil, "check", "--config", path)
	if code != 1 || strings.Count(out, "FAIL    publication") != 1 || !strings.Contains(out, `"billing"."outbox"`) {
		t.Fatalf("check with billing.outbox out of the publication: exit %d; want one failing publication line, for billing.outbox:\n%s", code, out)
	}
	if _, err := pool.Exec(ctx, `ALTER PUBLICATION outboxrelay ADD TABLE billing.outbox`); err != nil {
		t.Fatal(err)
	}

	p := startBinary(t, []string{"run", "--config", path})
	waitSlotActive(ctx, t, pool, role)
	for i, table := range []string{"sales.outbox", "billing.outbox"} {
		w := workload{table: table, aggType: []string{"sale", "invoice"}[i], writers: 1, aggregates: 5, events: 50}
		w.write(ctx, t, pool)
	}
	rows := readRows(ctx, t, pool, "sales.outbox", "billing.outbox")
	c := newCollector(t, brokers, "outbox.event.sale", "outbox.event.invoice")
	c.waitFor(t, rows, time.Minute)
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	c.settle(300 * time.Millisecond)
	c.check(t, rows, 8)
}
