package app

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestContainerMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		from  string
	}{
		{name: "cgroup v2 in a namespace", files: map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "268435456\n",
		}, want: 256 << 20, from: "sys/fs/cgroup/memory.max"},
		{name: "cgroup v2 nested path", files: map[string]string{
			"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "104857600\n",
		}, want: 100 << 20, from: "sys/fs/cgroup/kubepods/pod1/ctr/memory.max"},
		{name: "cgroup v2 without a limit", files: map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n",
		}},
		{name: "cgroup v1", files: map[string]string{
			"proc/self/cgroup": "12:cpu,cpuacct:/\n4:memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n",
		}, want: 512 << 20, from: "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"},
		{name: "cgroup v1 without a limit", files: map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}},
		{name: "no cgroup file", files: map[string]string{}},
		{name: "garbage", files: map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "lots\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, content := range tc.files {
				p = filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, from := containerMemoryLimit(root)
			if got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
			if tc.from != "" && from != filepath.Join(root, tc.from) {
				t.Errorf("read from %s, want %s", from, tc.from)
			}
		})
	}
}

// TestLimitMemory sets the runtime's limit from a container's, and
// leaves it alone when GOMEMLIMIT is set.
func TestLimitMemory(t *testing.T) {
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	root := t.TempDir()
	for p, content := range map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "268435456\n"} {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"GOMEMLIMIT": "200MiB"}
	if got, _ := limitMemory(func(k string) string { return env[k] }, root); got != 0 || debug.SetMemoryLimit(-1) != was {
		t.Errorf("with GOMEMLIMIT set: set %d, runtime limit %d; want none set", got, debug.SetMemoryLimit(-1))
	}
	delete(env, "GOMEMLIMIT")
	limit := float64(256 << 20)
	want := int64(limit * memoryLimitShare)
	if got, _ := limitMemory(func(k string) string { return env[k] }, root); got != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("without GOMEMLIMIT: set %d, runtime limit %d; want %d", got, debug.SetMemoryLimit(-1), want)
	}
}
