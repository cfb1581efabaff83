package initsql

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestApplyRunsWhatIsPrinted: --apply runs the very text init prints,
// step by step, comments and all, so that what a user reviewed is exactly
// what runs; only the header, comments alone, is not sent.
func TestApplyRunsWhatIsPrinted(t *testing.T) {
	for _, source := range []string{"cdc", "poll"} {
		t.Run(source, func(t *testing.T) {
			o := Options{Source: source, Schema: "app", Table: `out"box`, Database: "db", Role: "relay",
				Publication: "pub", Slot: "slot", PollerDDL: "-- the poller's\nSELECT 1;\nSELECT 2;",
				DeadLetterSchema: "app", DeadLetterTable: "dl"}
			s, err := Build(o)
			if err != nil {
				t.Fatal(err)
			}
			var ran []string
			if err := apply(s, func(sql string) error { ran = append(ran, sql); return nil }); err != nil {
				t.Fatal(err)
			}
			printed := s.String()
			header := comment(strings.Join(s.Header, "\n"))
			if got := header + "\n" + strings.Join(ran, "\n"); got != printed {
				t.Errorf("apply ran\n%s\nbut the script printed is\n%s", got, printed)
			}
			if ran[0] != "BEGIN;\n" || !slices.Contains(ran, "COMMIT;\n") {
				t.Errorf("apply ran %q; want BEGIN first and a COMMIT", ran)
			}
		})
	}
}

func TestApplyRollsBackTheTransactionOnly(t *testing.T) {
	s := Script{
		Tx:    []Statement{{Comment: "one", SQL: "SELECT 1;"}, {SQL: "SELECT 2;"}},
		After: []Statement{{Comment: "after", SQL: "SELECT 3;"}},
	}
	for _, tc := range []struct {
		name, fail string
		want       []string // what ran, the failing step included
		wantErr    string
	}{
		{"begin fails", "BEGIN;\n", []string{"BEGIN;\n"}, "begin: "},
		{"a statement fails", "SELECT 2;\n", []string{"BEGIN;\n", "-- one\nSELECT 1;\n", "SELECT 2;\n", "ROLLBACK"}, "SELECT 2;: "},
		{"commit fails", "COMMIT;\n", []string{"BEGIN;\n", "-- one\nSELECT 1;\n", "SELECT 2;\n", "COMMIT;\n", "ROLLBACK"}, "commit: "},
		{"after fails, with nothing to roll back", "-- after\nSELECT 3;\n", []string{"BEGIN;\n", "-- one\nSELECT 1;\n", "SELECT 2;\n", "COMMIT;\n", "-- after\nSELECT 3;\n"}, "SELECT 3;: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran []string
			err := apply(s, func(sql string) error {
				ran = append(ran, sql)
				if sql == tc.fail {
					return errors.New("refused")
				}
				return nil
			})
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("apply = %v, want an error starting %q", err, tc.wantErr)
			}
			if !slices.Equal(ran, tc.want) {
				t.Errorf("ran %q, want %q", ran, tc.want)
			}
		})
	}
}

// TestCommentCannotBreakOut: every line of a comment, however it breaks,
// starts with --.
func TestCommentCannotBreakOut(t *testing.T) {
	got := comment("a\rDROP TABLE x;\r\nb\nc")
	want := "-- a\n-- DROP TABLE x;\n-- b\n-- c\n"
	if got != want {
		t.Errorf("comment = %q, want %q", got, want)
	}
}
