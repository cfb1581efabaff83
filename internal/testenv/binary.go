package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var relayBinary struct {
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/outboxrelay once per test binary and returns the path
// of the executable, which lives until the test binary exits. Tests that
// check what a user runs (the shipped manifests, the container's files,
// the process's exit) run it rather than the packages beneath it.
// OUTBOXRELAY_TEST_BUILDFLAGS adds flags to the build ("-buildmode=pie",
// say).
func Binary(t testing.TB) string {
	t.Helper()
	b := &relayBinary
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "outboxrelay-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "outboxrelay")
		args := []string{"build", "-o", b.path}
		if flags := os.Getenv("OUTBOXRELAY_TEST_BUILDFLAGS"); flags != "" {
			args = append(args, strings.Fields(flags)...)
		}
		args = append(args, "github.com/outboxrelay/outboxrelay/cmd/outboxrelay")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
