package debezium

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestJavaHashOrderMatchesJDK runs the three maps of javahash.go in the
// JDK on this host (testdata/java/Orders.java: HashMap puts, the JDK 19
// and later copy, and org.json's sized copy of a Collectors.toMap map)
// for a few hundred sets of keys, and compares their iteration orders
// with javaPutOrder, javaCopyOrder and javaSizedOrder. The orders do not
// depend on the JDK's version but for the copy, which Orders.java sizes
// as JDK 19 and later do whatever JDK runs it.
func TestJavaHashOrderMatchesJDK(t *testing.T) {
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Skip("no javac on PATH: the JDK check of the HashMap model needs a JDK")
	}
	dir := t.TempDir()
	if out, err := exec.Command(javac, "-d", dir, filepath.Join("testdata", "java", "Orders.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	sets := javaKeySets(rand.New(rand.NewPCG(1, 2)), 400)
	cmd := exec.Command(filepath.Join(filepath.Dir(javac), "java"), "-cp", dir, "Orders")
	cmd.Stdin = strings.NewReader(strings.Join(sets, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(sets) {
		t.Fatalf("java printed %d lines for %d key sets", len(lines), len(sets))
	}
	for i, set := range sets {
		keys := strings.Split(set, ",")
		want := strings.Split(lines[i], "|")
		for j, got := range [][]string{javaPutOrder(keys), javaCopyOrder(keys), javaSizedOrder(keys)} {
			if w := strings.Split(want[j], ","); !slices.Equal(got, w) {
				t.Errorf("%s, %s: got %v, the JDK %v", set, []string{"put", "copy", "sized"}[j], got, w)
			}
		}
	}
}

// javaKeySets are n comma-joined sets of distinct keys: field names and
// property names as the router makes them, and random ones, from one to
// 40 keys a set, so that tables of every size up to 64 are filled.
func javaKeySets(r *rand.Rand, n int) []string {
	names := []string{"payload", "eventType", "id", "aggregateid", "aggregatetype", "type", "seq", "ok", "at",
		"created", "priority", "ratio", "blob", "customer", "lines", "tags", "sku", "qty", "name", "zip",
		"connect.type", "connect.version", "connect.index", "connect.parameters", "scale", "connect.decimal.precision"}
	var sets []string
	for range n {
		size := 1 + r.IntN(40)
		seen := map[string]bool{}
		var keys []string
		for len(keys) < size {
			var k string
			if r.IntN(2) == 0 {
				k = names[r.IntN(len(names))]
			} else {
				k = fmt.Sprintf("%c%d", 'a'+r.IntN(26), r.IntN(1000))
			}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		sets = append(sets, strings.Join(keys, ","))
	}
	return sets
}
