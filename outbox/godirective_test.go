package outbox_test

import (
	"go/version"
	"os/exec"
	"strings"
	"testing"
)

// TestGoDirectiveIsTheOldestTheDependenciesAllow: the module's go
// directive is the highest of its module graph's, no higher. go get and
// go mod tidy raise an application's go directive to the highest of the
// modules it requires, so a directive naming the Go that happened to build
// the module (a patch release, say) would raise every application's.
func TestGoDirectiveIsTheOldestTheDependenciesAllow(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the module graph with")
	}
	out, err := exec.Command(gocmd, "list", "-m", "-f", "{{if .Main}}main {{end}}{{.Path}} {{.GoVersion}}", "all").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	var own, highest, by string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "main":
			own = "go" + f[2]
		case len(f) == 2 && version.Compare("go"+f[1], highest) > 0:
			highest, by = "go"+f[1], f[0]
		}
	}
	if own == "" || highest == "" {
		t.Fatalf("go list -m all named no go directive of this module or of its dependencies:\n%s", out)
	}
	if own != highest {
		t.Errorf("go.mod says go %s, but the oldest Go the dependencies allow is %s (%s's): write go %s",
			strings.TrimPrefix(own, "go"), strings.TrimPrefix(highest, "go"), by, strings.TrimPrefix(highest, "go"))
	}
}
