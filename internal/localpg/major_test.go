package localpg_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

// TestMajorStartsAndDecodes starts each major MajorEnv can ask for and
// decodes a change through a pgoutput slot on it: the npm builds carry
// their own libraries (RUNPATH $ORIGIN/../lib) and pgoutput, which a
// server that starts but cannot decode would hide. A major not fetched
// here skips, naming the command that fetches it.
func TestMajorStartsAndDecodes(t *testing.T) {
	t.Setenv(localpg.BinDirEnv, "")
	majors := []int{15}
	for _, b := range localpg.Builds() {
		majors = append(majors, b.Major)
	}
	for _, major := range majors {
		t.Run(strconv.Itoa(major), func(t *testing.T) {
			t.Setenv(localpg.MajorEnv, strconv.Itoa(major))
			srv, err := localpg.Start(t.Context(), localpg.Options{})
			if errors.Is(err, localpg.ErrNotInstalled) {
				t.Skipf("PostgreSQL %d is not here: %v", major, err)
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() {
				if err := srv.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			if srv.Major() != major {
				t.Errorf("Major() = %d, want %d", srv.Major(), major)
			}
			conn := connect(t, srv.URL("postgres"))
			if v := queryString(t, conn, "SELECT (current_setting('server_version_num')::int / 10000)::text"); v != strconv.Itoa(major) {
				t.Errorf("server_version_num says major %s, want %d", v, major)
			}
			exec1(t, conn, "CREATE TABLE t (v text)")
			exec1(t, conn, "CREATE PUBLICATION p FOR TABLE t")
			exec1(t, conn, "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
			// The server runs synchronous_commit=off, and the slot reads
			// only WAL that is flushed.
			exec1(t, conn, "SET synchronous_commit = on")
			exec1(t, conn, "INSERT INTO t VALUES ('decoded')")
			// pgoutput's messages, in order: Begin, Relation, Insert,
			// Commit; the Insert ('I') carries the row's text.
			rows, err := conn.Query(t.Context(), `SELECT data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL,
				'proto_version', '1', 'publication_names', 'p')`)
			if err != nil {
				t.Fatalf("read the slot: %v", err)
			}
			msgs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
			if err != nil {
				t.Fatalf("read the slot: %v", err)
			}
			var kinds string
			inserted := false
			for _, m := range msgs {
				kinds += string(m[0])
				inserted = inserted || (m[0] == 'I' && strings.Contains(string(m), "decoded"))
			}
			if kinds != "BRIC" || !inserted {
				t.Errorf("pgoutput sent messages %q (inserted row seen: %v), want BRIC with the row", kinds, inserted)
			}

			// The npm builds have no client programs: ClientTool finds
			// another installation's, which must speak to this server.
			psql, err := srv.ClientTool("psql")
			if errors.Is(err, localpg.ErrNotInstalled) {
				t.Skipf("no psql here: %v", err)
			}
			if err != nil {
				t.Fatalf("ClientTool: %v", err)
			}
			out, err := exec.CommandContext(t.Context(), psql, "-X", "-At", "-d", srv.URL("postgres"), "-c", "SELECT count(*) FROM t").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "1" {
				t.Errorf("%s against PostgreSQL %d: %v, output %q; want 1", psql, major, err, out)
			}
		})
	}
}

// TestMajorMissing asks for a major that is neither installed nor fetched:
// the error is an ErrNotInstalled (so tests skip) that names the command
// fetching it.
func TestMajorMissing(t *testing.T) {
	t.Setenv(localpg.BinDirEnv, "")
	t.Setenv(localpg.CacheEnv, t.TempDir())
	var b localpg.Build
	for _, c := range localpg.Builds() {
		if _, err := os.Stat(filepath.Join("/usr/lib/postgresql", strconv.Itoa(c.Major))); err != nil {
			b = c
		}
	}
	if b.Major == 0 {
		t.Skip("every pinned major is also installed under /usr/lib/postgresql")
	}
	t.Setenv(localpg.MajorEnv, strconv.Itoa(b.Major))
	_, err := localpg.Start(t.Context(), localpg.Options{})
	if !errors.Is(err, localpg.ErrNotInstalled) {
		t.Fatalf("Start with PostgreSQL %d not fetched: got %v, want ErrNotInstalled", b.Major, err)
	}
	for _, want := range []string{"scripts/fetch-postgres " + strconv.Itoa(b.Major), b.Version, localpg.MajorEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestMajorBadSetting: a value that is no major, or one the relay does not
// support, and a major that OUTBOXRELAY_PG_BIN contradicts, are errors
// that name the variable, not a skip.
func TestMajorBadSetting(t *testing.T) {
	debian15 := "/usr/lib/postgresql/15/bin"
	for _, tc := range []struct {
		name, major, binDir, want string
	}{
		{"not a number", "seventeen", "", `OUTBOXRELAY_TEST_PG="seventeen": want a PostgreSQL major version, 13 or newer`},
		{"too old", "12", "", `OUTBOXRELAY_TEST_PG="12": want a PostgreSQL major version, 13 or newer`},
		{"bin dir of another major", "17", debian15, "OUTBOXRELAY_TEST_PG=17, but " + debian15 + " is PostgreSQL 15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.binDir != "" {
				if _, err := os.Stat(filepath.Join(tc.binDir, "postgres")); err != nil {
					t.Skipf("needs %s: %v", tc.binDir, err)
				}
			}
			t.Setenv(localpg.BinDirEnv, tc.binDir)
			t.Setenv(localpg.MajorEnv, tc.major)
			_, err := localpg.Start(t.Context(), localpg.Options{})
			if err == nil || errors.Is(err, localpg.ErrNotInstalled) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestDocsNameThePinnedBuilds keeps docs/database.md's list of the
// tested majors in step with embedded-postgres.txt.
func TestDocsNameThePinnedBuilds(t *testing.T) {
	doc, err := os.ReadFile("../../docs/database.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range localpg.Builds() {
		// 17.10.0-beta.17 is PostgreSQL 17.10.
		parts := strings.SplitN(b.Version, ".", 3)
		if want := parts[0] + "." + parts[1]; !strings.Contains(string(doc), want) {
			t.Errorf("docs/database.md does not name %s, the pinned build of PostgreSQL %d (%s)", want, b.Major, b.Version)
		}
	}
}
