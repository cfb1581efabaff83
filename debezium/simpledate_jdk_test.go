package debezium

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimpleDateFormatMatchesJDK formats timestamps with patterns of every
// letter outboxrelay writes, in the JDK on this host (testdata/java/
// Dates.java: SimpleDateFormat in UTC, as TimestampRouter sets it, with
// an English locale) and with simpleDateFormat, and compares the text.
func TestSimpleDateFormatMatchesJDK(t *testing.T) {
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Skip("no javac on PATH: the JDK check of SimpleDateFormat needs a JDK")
	}
	dir := t.TempDir()
	if out, err := exec.Command(javac, "-d", dir, filepath.Join("testdata", "java", "Dates.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	patterns := []string{"yyyyMMdd", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "yy-M-d H:m:s.S", "MMM MMMM EEE EEEE", "hh:mm a, kk KK h k",
		"D DDD F u G", "'quoted '' text' y", "z zzzz Z X", "yyyyy SSSS ''", "dd.MM.yyyy"}
	rng := rand.New(rand.NewPCG(7, 11))
	var lines []string
	for _, p := range patterns {
		for _, ms := range []int64{0, 1700000000123, 951782400000, -1, 253402300799999, rng.Int64N(4102444800000)} {
			lines = append(lines, fmt.Sprintf("%d\t%s", ms, p))
		}
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(javac), "java"), "-cp", dir, "Dates")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v\n%s", err, stderr.String())
	}
	want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(want) != len(lines) {
		t.Fatalf("java printed %d lines for %d", len(want), len(lines))
	}
	for i, line := range lines {
		var ms int64
		var p string
		fmt.Sscanf(line, "%d", &ms)
		_, p, _ = strings.Cut(line, "\t")
		f, err := parseSimpleDateFormat(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if got := f.format(ms); got != want[i] {
			t.Errorf("%d %q: got %q, the JDK %q", ms, p, got, want[i])
		}
	}
}
