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
