package replay

import (
	"strings"
	"testing"
	"time"
)

func TestSelectionValidate(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		sel  Selection
		want string // "" for valid
	}{
		{"a range", Selection{Since: t0}, ""},
		{"a bounded range", Selection{Since: t0, Until: t0.Add(time.Hour)}, ""},
		{"ids", Selection{IDs: []string{"a"}}, ""},
		{"a file of ids", Selection{IDsFile: "ids.txt"}, ""},
		{"an aggregate", Selection{AggregateType: "order", AggregateID: "1"}, ""},
		{"an aggregate in a range", Selection{AggregateType: "order", AggregateID: "1", Since: t0}, ""},
		{"nothing", Selection{}, "choose the rows"},
		{"ids and a range", Selection{IDs: []string{"a"}, Since: t0}, "--id and --ids-file choose rows by themselves"},
		{"until alone", Selection{IDs: []string{"a"}, Until: t0}, "--until needs --since"},
		{"until before since", Selection{Since: t0, Until: t0}, "is not after --since"},
		{"half an aggregate", Selection{AggregateType: "order"}, "TYPE:ID, both parts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestChooseTime: the poller's rows are never told by their xmin, which
// its mark rewrote; the CDC source's by the server's commit times first.
func TestChooseTime(t *testing.T) {
	for _, tc := range []struct {
		poll, track bool
		column      string
		want        timeSource
	}{
		{false, true, "", timeCommit},
		{false, true, "created_at", timeCommitOrColumn},
		{false, false, "created_at", timeColumn},
		{false, false, "", timeNone},
		{true, true, "", timePublished},
		{true, false, "", timePublished},
		{true, true, "created_at", timeColumn},
	} {
		if got := chooseTime(tc.poll, tc.track, tc.column); got != tc.want {
			t.Errorf("chooseTime(poll %v, track_commit_timestamp %v, column %q) = %v, want %v", tc.poll, tc.track, tc.column, got, tc.want)
		}
	}
}

func TestTextArray(t *testing.T) {
	got := textArray([]string{"a", `b"c`, `d\e`, "f,g", ""})
	if want := `{"a","b\"c","d\\e","f,g",""}`; got != want {
		t.Errorf("textArray = %s, want %s", got, want)
	}
}
