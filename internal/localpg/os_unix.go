//go:build unix

package localpg

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

type credential = syscall.Credential

// quitSignal asks the postmaster for an immediate shutdown.
const quitSignal = syscall.SIGQUIT

// serverCredential returns the user to run initdb and postgres as: nil (the
// current user) unless we are root, which both refuse; then the OS user
// postgres that every PostgreSQL package creates.
func serverCredential() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(superuser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs an OS user %q to run PostgreSQL as (installing PostgreSQL creates it, or run `useradd --system %s`): %w",
			superuser, superuser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid %q of OS user %s: %w", u.Uid, superuser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid %q of OS user %s: %w", u.Gid, superuser, err)
	}
	return &credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// checkReachable returns an error naming the first parent of dir that the
// user cred cannot search, since initdb would only say "permission denied".
// It reads the mode bits only: root gave cred no supplementary groups and no
// ACLs are expected on such paths.
func checkReachable(dir string, cred *credential) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("check directory %s: %w", d, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		var search os.FileMode = 0o001
		switch {
		case st.Uid == cred.Uid:
			search = 0o100
		case st.Gid == cred.Gid:
			search = 0o010
		}
		if fi.Mode().Perm()&search == 0 {
			return fmt.Errorf("directory %s is out of reach of OS user %s, which runs PostgreSQL because we run as root: "+
				"its parent %s (mode %v) is not searchable by that user; choose a Dir under /tmp or run `chmod o+x %s`",
				dir, superuser, d, fi.Mode().Perm(), d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
