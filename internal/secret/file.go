package secret

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// MaxFileBytes bounds what ReadFile reads. The largest secret the relay
// reads from a file is a connection string (postgres.url_file) or a PEM
// private key (an RSA key of 8192 bits is under 7 KiB), so 64 KiB leaves
// ample room while keeping a wrong path (a log file, a device such as
// /dev/urandom) from filling memory.
const MaxFileBytes = 64 << 10

// ReadFile reads the secret file at path, which key names (as
// "postgres.password_file") in errors. It refuses a file that is not a
// regular one (a device, a FIFO, a directory; a symbolic link is followed,
// as Kubernetes mounts secrets) and one larger than MaxFileBytes, before
// reading more than that.
func ReadFile(key, path string) ([]byte, error) {
	return readFile(key, path, MaxFileBytes)
}

func readFile(key, path string, limit int64) ([]byte, error) {
	// Stat first: opening a FIFO would wait for a writer. A file that
	// cannot be looked at is left to Open to say why.
	if fi, err := os.Stat(path); err == nil {
		if err := regular(key, path, fi); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	defer f.Close()
	// Again on what was opened, which may have been swapped meanwhile.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if err := regular(key, path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %s is larger than %d KiB, more than any secret the relay reads; point %s at the file that holds the secret alone", key, path, limit>>10, key)
	}
	return b, nil
}

// regular refuses what is not a regular file, naming what it is.
func regular(key, path string, fi fs.FileInfo) error {
	m := fi.Mode()
	if m.IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a block device"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	}
	return fmt.Errorf("%s: %s is %s, not a regular file; point %s at the file that holds the secret", key, path, what, key)
}

// Exposed is a warning naming key, path and the chmod to run when
// the secret file at path may be read by others than the relay's user.
// The rule is libpq's for a client key (fe-secure-openssl.c): a file owned
// by root may be 0640 at most, so that a group the relay belongs to can
// read it (Kubernetes mounts secrets owned by root, with the pod's fsGroup,
// as deploy/kubernetes does with mode 0440); any other, 0600 at most. It
// is "" when the file is private enough, or cannot be looked at (then
// reading it says why), or off Unix, whose mode bits say little.
func Exposed(key, path string) string {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || owner(fi) < 0 {
		return ""
	}
	perm := fi.Mode().Perm()
	bad, want := perm&0o077, fs.FileMode(0o600)
	if owner(fi) == 0 {
		bad, want = perm&0o037, 0o640
	}
	if bad == 0 {
		return ""
	}
	who := "its group"
	if perm&0o007 != 0 {
		who = "every user of the machine"
	}
	return fmt.Sprintf("%s: %s has mode %04o, so %s can read the secret in it; run chmod %o %s (for a Kubernetes secret, set defaultMode: 0440 and the pod's fsGroup)",
		key, path, perm, who, want&perm|0o400, path)
}

// TrimLineEnd drops the line break that editors and `kubectl create
// secret --from-file` leave at the end of a secret file.
func TrimLineEnd(b []byte) string { return strings.TrimRight(string(b), "\r\n") }
