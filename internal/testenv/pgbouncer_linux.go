//go:build linux

package testenv

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

type bouncerCred = syscall.Credential

// bouncerCredential is the user pgbouncer runs as: the current one, or
// when that is root, which pgbouncer refuses, the OS user postgres.
func bouncerCredential() (*bouncerCred, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs an OS user postgres to run pgbouncer as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &bouncerCred{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chown(path string, cred *bouncerCred) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

func bouncerSysProcAttr(cred *bouncerCred) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
