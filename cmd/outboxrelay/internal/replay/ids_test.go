package replay

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestIDList: the ids of the command line, then the file's, in chunks,
// blank lines and comments skipped; skip passes over those done, and the
// digest tells one list from another.
func TestIDList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids.txt")
	if err := os.WriteFile(path, []byte("f1\n\n# a comment\n  f2  \nf3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sel := Selection{IDs: []string{"a", "b"}, IDsFile: path}
	l, err := openIDs(sel)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var chunks [][]string
	for {
		c, err := l.next(2)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) == 0 {
			break
		}
		chunks = append(chunks, c)
	}
	want := [][]string{{"a", "b"}, {"f1", "f2"}, {"f3"}}
	if !slices.EqualFunc(chunks, want, slices.Equal) {
		t.Errorf("chunks %q, want %q", chunks, want)
	}
	all := l.digest()

	again, _ := openIDs(sel)
	defer again.Close()
	if err := again.skip(3); err != nil {
		t.Fatal(err)
	}
	if c, _ := again.next(10); !slices.Equal(c, []string{"f2", "f3"}) {
		t.Errorf("after skipping 3: %q, want f2 f3", c)
	}
	if again.digest() != all {
		t.Error("the digest of the same ids differs")
	}
	other, _ := openIDs(Selection{IDs: []string{"a"}})
	_, _ = other.next(10)
	if other.digest() == all {
		t.Error("two lists of ids have the same digest")
	}
	if err := other.skip(5); err == nil {
		t.Error("skipping past the end of the ids is no error")
	}
}
