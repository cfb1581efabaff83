package app

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the container's memory limit the Go
// runtime is told to stay under when GOMEMLIMIT is not set: the rest is
// what the runtime does not count (the binary's pages, thread stacks) and
// room for a collection to finish.
const memoryLimitShare = 0.9

// limitMemory sets the Go runtime's soft memory limit to
// memoryLimitShare of the container's when GOMEMLIMIT is not set, so
// that a relay without it collects harder near the limit instead of
// being killed at it: Go sizes GOMAXPROCS from the container's CPU limit
// by itself, but not its memory. It returns the limit set and the file
// it came from; 0 when it set none (GOMEMLIMIT set, or no limit found).
func limitMemory(getenv func(string) string, root string) (int64, string) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, ""
	}
	limit, from := containerMemoryLimit(root)
	if limit <= 0 {
		return 0, ""
	}
	set := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(set)
	return set, from
}

// containerMemoryLimit reads the memory limit of this process's cgroup
// under root ("/" but in tests): cgroup v2's memory.max, or cgroup v1's
// memory.limit_in_bytes. 0 when there is none.
func containerMemoryLimit(root string) (int64, string) {
	cg, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, ""
	}
	var candidates []string
	sc := bufio.NewScanner(bytes.NewReader(cg))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2's is 0::path.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates,
				filepath.Join(root, "sys/fs/cgroup", parts[2], "memory.max"),
				filepath.Join(root, "sys/fs/cgroup/memory.max"))
		case hasController(parts[1], "memory"):
			candidates = append(candidates,
				filepath.Join(root, "sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"),
				filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes"))
		}
	}
	for _, path := range candidates {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, ""
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 says "no limit" with a number near the largest.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, ""
		}
		return n, path
	}
	return 0, ""
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
