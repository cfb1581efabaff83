package secret

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFile reads a regular file and refuses, naming the key and the
// path, what a secret file cannot be: a device (read without end), a FIFO
// (opening it waits for a writer), a directory, and a file past the bound,
// of which it reads no more than the bound.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "password")
	if err := os.WriteFile(regular, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large")
	if err := os.WriteFile(large, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	atBound := filepath.Join(dir, "at-bound")
	if err := os.WriteFile(atBound, []byte(strings.Repeat("x", MaxFileBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want, err string
	}{
		{"regular file", regular, "s3cret\n", ""},
		{"symbolic link to one, as Kubernetes mounts secrets", link, "s3cret\n", ""},
		{"at the bound", atBound, strings.Repeat("x", MaxFileBytes), ""},
		{"device", "/dev/urandom", "", "k.password_file: /dev/urandom is a character device, not a regular file"},
		{"FIFO", fifo, "", "k.password_file: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{"directory", dir, "", "k.password_file: " + dir + " is a directory, not a regular file"},
		{"too large", large, "", "k.password_file: " + large + " is larger than 64 KiB"},
		{"missing", filepath.Join(dir, "none"), "", "k.password_file: open " + filepath.Join(dir, "none")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFile("k.password_file", tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ReadFile(%s) = %d bytes, %v; want an error saying %q", tc.path, len(got), err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("ReadFile(%s) = %.20q, %v; want %.20q", tc.path, got, err, tc.want)
			}
		})
	}
}

// TestExposed warns, with the chmod to run, about a secret file others can
// read, by libpq's rule: 0600 at most, or 0640 for a file owned by root
// (a Kubernetes secret mounted 0440 with an fsGroup).
func TestExposed(t *testing.T) {
	dir := t.TempDir()
	root := os.Geteuid() == 0
	for _, tc := range []struct {
		name string
		mode os.FileMode
		want string // "" for no warning
	}{
		{"owner only", 0o600, ""},
		{"owner read only", 0o400, ""},
		{"world-readable and writable", 0o666, "has mode 0666, so every user of the machine can read the secret in it; run chmod " + map[bool]string{true: "640", false: "600"}[root]},
		{"world-readable", 0o644, "every user of the machine"},
		{"group-readable", 0o640, map[bool]string{true: "", false: "has mode 0640, so its group can read the secret in it; run chmod 600"}[root]},
		{"group-readable, read only", 0o440, map[bool]string{true: "", false: "run chmod 400"}[root]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, []byte("s3cret"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			got := Exposed("k.password_file", path)
			switch {
			case tc.want == "" && got != "":
				t.Errorf("mode %04o: warning %q, want none", tc.mode, got)
			case tc.want != "" && (!strings.Contains(got, tc.want) || !strings.HasPrefix(got, "k.password_file: "+path)):
				t.Errorf("mode %04o: warning %q, want one naming the key and path and saying %q", tc.mode, got, tc.want)
			}
		})
	}
	if got := Exposed("k", "/dev/null"); got != "" {
		t.Errorf("a device: %q; reading it says what is wrong", got)
	}
}
