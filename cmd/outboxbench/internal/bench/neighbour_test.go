package bench

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "0", want: []int{0}},
		{in: "0,1", want: []int{0, 1}},
		{in: "0-3,6", want: []int{0, 1, 2, 3, 6}},
		{in: " 1 , 2", want: []int{1, 2}},
		{in: "", bad: true},
		{in: "a", bad: true},
		{in: "3-1", bad: true},
		{in: "-1", bad: true},
		{in: "0,", bad: true},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := parseCPUList(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("parseCPUList(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("parseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestStartPinned starts a process pinned to CPU 0 and reads the mask
// the kernel gives it; the benchmark's own threads keep theirs.
func TestStartPinned(t *testing.T) {
	allowed := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`)
	mask := func(pid string) string {
		b, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Skipf("no /proc here: %v", err)
		}
		m := allowed.FindSubmatch(b)
		if m == nil {
			t.Skipf("/proc/%s/status has no Cpus_allowed_list", pid)
		}
		return string(m[1])
	}
	before := mask("self")
	if !strings.Contains(before, "-") && !strings.Contains(before, ",") {
		t.Skipf("this process may run on CPUs %s only: nothing to pin to", before)
	}
	cmd := exec.Command("sleep", "30")
	if err := startPinned(cmd, []int{0}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got := mask(strconv.Itoa(cmd.Process.Pid)); got != "0" {
		t.Errorf("the child may run on CPUs %s, want 0", got)
	}
	if got := mask("self"); got != before {
		t.Errorf("the benchmark's mask is %s after the start, was %s", got, before)
	}
}
