package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the built binary, as a user or a script would: its exit
// status and which stream the usage goes to are part of what it promises.

// testVersion is stamped with -ldflags into the second binary, which
// shows that a release build names its release.
const testVersion = "v9.8.7-cli-test"

// build is one binary, built at most once per test run, however many tests
// use it.
type build struct {
	ldflags string
	once    sync.Once
	path    string
	err     error
}

var (
	buildDir  string
	plain     = &build{}
	versioned = &build{ldflags: "-X github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app.Version=" + testVersion}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the path of b, building it the first time; it skips the
// test when there is no go command to build with.
func (b *build) binary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to build outboxrelay with")
	}
	b.once.Do(func() {
		if buildDir == "" {
			if buildDir, b.err = os.MkdirTemp("", "outboxrelay-cli-test-"); b.err != nil {
				return
			}
		}
		b.path = filepath.Join(buildDir, "outboxrelay")
		args := []string{"build", "-o"}
		if b.ldflags != "" {
			b.path += "-versioned"
			args = append(args, b.path, "-ldflags", b.ldflags, ".")
		} else {
			args = append(args, b.path, ".")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
			b.err = errors.New("go " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out))
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

type result struct {
	code           int
	stdout, stderr string
}

// execute runs the binary with args and the environment without any
// OUTBOXRELAY_ variable, so the machine's settings do not leak in.
func execute(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOXRELAY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("outboxrelay %s: %v", strings.Join(args, " "), err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// docsPages are the pages of docs/ that `outboxrelay --help` names.
var docsPages = []string{
	"docs/getting-started.md", "docs/configuration.md", "docs/debezium.md", "docs/schema-registry.md", "docs/operations.md",
	"docs/poller.md", "docs/guarantees.md", "docs/architecture.md", "docs/performance.md", "docs/status.md",
	"docs/replay.md", "docs/database.md", "docs/security.md",
}

// TestHelp: -h, -help and --help on every command print its usage, naming
// the page of the docs that explains it, to stdout, and exit 0: help is
// not an error, and `outboxrelay run --help | less` must work.
func TestHelp(t *testing.T) {
	bin := plain.binary(t)
	for _, tc := range []struct {
		args  []string
		usage string // how the usage starts
		docs  string
	}{
		{[]string{"-h"}, "outboxrelay relays", "docs/getting-started.md"},
		{[]string{"--help"}, "outboxrelay relays", "docs/getting-started.md"},
		{[]string{"help"}, "outboxrelay relays", "docs/getting-started.md"},
		{[]string{"run", "-h"}, "Usage: outboxrelay run", "docs/configuration.md"},
		{[]string{"run", "--help"}, "Usage: outboxrelay run", "docs/debezium.md"},
		{[]string{"help", "run"}, "Usage: outboxrelay run", "docs/configuration.md"},
		{[]string{"demo", "--help"}, "Usage: outboxrelay demo", "docs/getting-started.md"},
		{[]string{"debezium", "--help"}, "Usage: outboxrelay debezium translate", "docs/debezium.md"},
		{[]string{"debezium", "translate", "--help"}, "Usage: outboxrelay debezium translate FILE", "docs/debezium.md"},
		{[]string{"debezium", "compatibility", "-h"}, "Usage: outboxrelay debezium compatibility", "docs/debezium.md"},
		{[]string{"poll-ddl", "--help"}, "Usage: outboxrelay poll-ddl", "docs/poller.md"},
		{[]string{"poll-ddl", "-help"}, "Usage: outboxrelay poll-ddl", "docs/poller.md"},
		{[]string{"init", "--help"}, "Usage: outboxrelay init", "docs/database.md"},
		{[]string{"check", "-h"}, "Usage: outboxrelay check", "docs/database.md"},
		{[]string{"status", "-h"}, "Usage: outboxrelay status", "docs/status.md"},
		{[]string{"help", "status"}, "Usage: outboxrelay status", "docs/status.md"},
		{[]string{"backfill", "-h"}, "Usage: outboxrelay backfill", "docs/guarantees.md#recovering-the-gap-outboxrelay-backfill"},
		{[]string{"replay", "-h"}, "Usage: outboxrelay replay", "docs/replay.md"},
		{[]string{"dead-letters", "--help"}, "Usage: outboxrelay dead-letters", "docs/replay.md#dead-letters"},
		{[]string{"dead-letters", "redrive", "-h"}, "Usage: outboxrelay dead-letters", "docs/replay.md#dead-letters"},
		{[]string{"config-dump", "--help"}, "Usage: outboxrelay config-dump", "docs/operations.md"},
		{[]string{"config-reference", "-h"}, "Usage: outboxrelay config-reference", "docs/configuration.md"},
		{[]string{"version", "--help"}, "Usage: outboxrelay version", "docs/operations.md"},
		// Help comes first, whatever else is on the line.
		{[]string{"check", "--config", "/nonexistent.yaml", "-h"}, "Usage: outboxrelay check", "docs/database.md"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := execute(t, bin, tc.args...)
			if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, tc.usage) || !strings.Contains(r.stdout, tc.docs) {
				t.Errorf("want exit 0, nothing on stderr, and stdout starting %q and naming %s; got %s", tc.usage, tc.docs, r)
			}
		})
	}
	r := execute(t, bin, "--help")
	for _, page := range docsPages {
		if !strings.Contains(r.stdout, page) {
			t.Errorf("outboxrelay --help does not name %s:\n%s", page, r.stdout)
		}
	}
	for _, flag := range []string{"-apply", "-admin-url", "-role", "-no-slot"} {
		if r := execute(t, bin, "init", "-h"); !strings.Contains(r.stdout, flag) {
			t.Errorf("outboxrelay init -h does not list %s:\n%s", flag, r.stdout)
		}
	}
}

// TestUsageErrors: an unknown command or flag, or a wrong number of
// arguments, prints the usage and the mistake to stderr, nothing to stdout,
// and exits 2, which scripts tell from a failure of the work (1).
func TestUsageErrors(t *testing.T) {
	bin := plain.binary(t)
	for _, tc := range []struct {
		args  []string
		usage string
		err   string
	}{
		{nil, "outboxrelay relays", "outboxrelay: no command given"},
		{[]string{"bogus"}, "outboxrelay relays", `outboxrelay: unknown command "bogus"`},
		{[]string{"help", "bogus"}, "outboxrelay relays", `outboxrelay: unknown command "bogus"`},
		{[]string{"--bogus"}, "outboxrelay relays", "outboxrelay: flag provided but not defined: -bogus"},
		{[]string{"run", "--bogus"}, "Usage: outboxrelay run", "outboxrelay run: flag provided but not defined: -bogus"},
		// A forgotten --config would otherwise run on the environment alone.
		{[]string{"run", "outboxrelay.yaml"}, "Usage: outboxrelay run", `outboxrelay run: unexpected argument "outboxrelay.yaml"`},
		{[]string{"demo", "-x"}, "Usage: outboxrelay demo", "outboxrelay demo: flag provided but not defined: -x"},
		{[]string{"debezium"}, "Usage: outboxrelay debezium", "outboxrelay debezium: no command given"},
		{[]string{"debezium", "translat", "f.json"}, "Usage: outboxrelay debezium", `outboxrelay debezium: unknown command "translat"`},
		{[]string{"debezium", "translate"}, "Usage: outboxrelay debezium translate", "outboxrelay debezium translate: FILE is missing"},
		{[]string{"debezium", "translate", "a", "b"}, "Usage: outboxrelay debezium translate", `outboxrelay debezium translate: unexpected argument "b"`},
		{[]string{"debezium", "compatibility", "--markdown"}, "Usage: outboxrelay debezium compatibility", "flag provided but not defined: -markdown"},
		{[]string{"poll-ddl", "--table", "x"}, "Usage: outboxrelay poll-ddl", "outboxrelay poll-ddl: flag provided but not defined: -table"},
		{[]string{"init", "--aply"}, "Usage: outboxrelay init", "outboxrelay init: flag provided but not defined: -aply"},
		{[]string{"check", "--timeout", "soon"}, "Usage: outboxrelay check", `outboxrelay check: invalid value "soon" for flag -timeout`},
		{[]string{"status", "--bogus"}, "Usage: outboxrelay status", "outboxrelay status: flag provided but not defined: -bogus"},
		{[]string{"status", "relay.yaml"}, "Usage: outboxrelay status", `outboxrelay status: unexpected argument "relay.yaml"`},
		{[]string{"backfill", "--config", "x.yaml"}, "Usage: outboxrelay backfill", "outboxrelay backfill: give exactly one of --after-checkpoint, --since TIME and --all"},
		{[]string{"backfill", "--all", "--after-checkpoint"}, "Usage: outboxrelay backfill", "give exactly one of"},
		{[]string{"backfill", "--since", "yesterday"}, "Usage: outboxrelay backfill", `--since "yesterday" is not an RFC 3339 time`},
		{[]string{"replay", "--config", "x.yaml"}, "Usage: outboxrelay replay", "outboxrelay replay: choose the rows"},
		{[]string{"replay", "--since", "yesterday"}, "Usage: outboxrelay replay", `--since "yesterday" is not an RFC 3339 time`},
		{[]string{"replay", "--id", "a", "--since", "2026-01-01T00:00:00Z"}, "Usage: outboxrelay replay", "--id and --ids-file choose rows by themselves"},
		{[]string{"replay", "--resume", "r1", "--id", "a"}, "Usage: outboxrelay replay", "--resume carries on with the replay's own selection"},
		{[]string{"replay", "--aggregate", "order"}, "Usage: outboxrelay replay", `--aggregate "order" is not TYPE:ID`},
		{[]string{"dead-letters"}, "Usage: outboxrelay dead-letters", "outboxrelay dead-letters: no command given"},
		{[]string{"dead-letters", "purge"}, "Usage: outboxrelay dead-letters", `unknown command "purge"`},
		{[]string{"dead-letters", "show"}, "Usage: outboxrelay dead-letters", "EVENT_ID is missing"},
		{[]string{"dead-letters", "redrive", "--reason", "("}, "Usage: outboxrelay dead-letters", "is not a regular expression"},
		{[]string{"config-dump", "-c", "x"}, "Usage: outboxrelay config-dump", "outboxrelay config-dump: flag provided but not defined: -c"},
		{[]string{"config-reference", "--json"}, "Usage: outboxrelay config-reference", "flag provided but not defined: -json"},
		{[]string{"version", "--short"}, "Usage: outboxrelay version", "outboxrelay version: flag provided but not defined: -short"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := execute(t, bin, tc.args...)
			if r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, tc.usage) || !strings.Contains(r.stderr, tc.err) {
				t.Errorf("want exit 2, nothing on stdout, and stderr starting %q and saying %q; got %s", tc.usage, tc.err, r)
			}
		})
	}
}

// TestVersion: `outboxrelay version` says what the toolchain recorded in
// the binary (debug/buildinfo reads what `go version -m` prints): the
// module version, the VCS revision and time, whether the tree was
// modified, and the Go version; a version set with -ldflags replaces the
// module version only.
func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name        string
		b           *build
		wantVersion func(moduleVersion string) string
	}{
		{"go build", plain, func(v string) string {
			if v == "" || v == "(devel)" {
				return "dev"
			}
			return v
		}},
		{"version set with -ldflags", versioned, func(string) string { return testVersion }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := tc.b.binary(t)
			bi, err := buildinfo.ReadFile(bin)
			if err != nil {
				t.Fatalf("read the build info of %s: %v", bin, err)
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			revision, at := "unknown (built without version control information)", "unknown"
			if rev, ok := settings["vcs.revision"]; ok {
				revision = rev
				if settings["vcs.modified"] == "true" {
					revision += " (modified)"
				}
				at = settings["vcs.time"]
			} else {
				// In a git worktree (a .git file, not a directory) or with
				// -buildvcs=false, the toolchain records no commit.
				t.Log("the toolchain recorded no VCS information; checking that version says so")
			}
			want := "outboxrelay " + tc.wantVersion(bi.Main.Version) + "\n" +
				"revision: " + revision + "\n" +
				"time:     " + at + "\n" +
				"go:       " + bi.GoVersion + " " + settings["GOOS"] + "/" + settings["GOARCH"] + "\n"
			r := execute(t, bin, "version")
			if r.code != 0 || r.stdout != want || r.stderr != "" {
				t.Errorf("want exit 0 and stdout\n%s\ngot %s", want, r)
			}
		})
	}
}

// TestConfigProblemsInTwoSections: a configuration with problems in two
// sections is refused with both named, by every command that validates it,
// and exits 1, not 2: the call was right, the file is wrong.
func TestConfigProblemsInTwoSections(t *testing.T) {
	bin := plain.binary(t)
	path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
	const cfg = `postgres:
  url: postgres://relay@127.0.0.1:1/app
source: cdcx
poll:
  buckets: 3
kafka:
  brokers: [127.0.0.1:1]
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"run", "check", "config-dump", "status"} {
		t.Run(cmd, func(t *testing.T) {
			r := execute(t, bin, cmd, "--config", path)
			for _, want := range []string{`source: "cdcx" is not cdc or poll`, "poll.buckets: 3 is not a power of two"} {
				if r.code != 1 || !strings.Contains(r.stderr, want) {
					t.Errorf("want exit 1 and stderr saying %q; got %s", want, r)
				}
			}
			if strings.Contains(r.stderr, "Usage:") {
				t.Errorf("a problem with the file printed the usage; got %s", r)
			}
		})
	}
}

// TestDocsPagesExist: every page the usage names is in docs/, so a user
// sent there finds it.
func TestDocsPagesExist(t *testing.T) {
	var missing []string
	for _, page := range docsPages {
		if _, err := os.Stat(filepath.Join("..", "..", page)); err != nil {
			missing = append(missing, page)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the usage names pages that docs/ lacks: %s", strings.Join(missing, ", "))
	}
}

// TestInitSeveralTables: `init` for outbox.tables prints one script that
// makes each table with its own columns, the publication for all of them,
// and the role and slot once; it needs no connection to print it.
func TestInitSeveralTables(t *testing.T) {
	bin := plain.binary(t)
	path := filepath.Join(t.TempDir(), "outboxrelay.yaml")
	cfg := `postgres:
  url: postgres://relay@db:5432/app
kafka:
  brokers: [kafka:9092]
outbox:
  tables:
    - sales.outbox
    - name: billing.outbox
      columns: {aggregateid: account_id}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := execute(t, bin, "init", "--config", path)
	if r.code != 0 {
		t.Fatalf("init: %s", r)
	}
	for _, want := range []string{
		`CREATE TABLE IF NOT EXISTS "sales"."outbox" (` + "\n" + `  "id"            uuid`,
		`"aggregateid"   varchar(255) NOT NULL`,
		`CREATE TABLE IF NOT EXISTS "billing"."outbox"`,
		`"account_id"    varchar(255) NOT NULL`,
		`CREATE PUBLICATION "outboxrelay" FOR TABLE "sales"."outbox"`,
		`ALTER PUBLICATION "outboxrelay" ADD TABLE "billing"."outbox"`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("init does not print %q:\n%s", want, r.stdout)
		}
	}
	for _, once := range []string{"CREATE ROLE", "pg_create_logical_replication_slot", "GRANT CONNECT"} {
		if n := strings.Count(r.stdout, once); n != 1 {
			t.Errorf("%q %d times in the script, want once:\n%s", once, n, r.stdout)
		}
	}
}
