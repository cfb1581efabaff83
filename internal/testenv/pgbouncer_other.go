//go:build !linux

package testenv

import (
	"errors"
	"os"
	"syscall"
)

type bouncerCred struct{}

// bouncerCredential: only Linux runs pgbouncer as another user here.
func bouncerCredential() (*bouncerCred, error) {
	if os.Geteuid() == 0 {
		return nil, errors.New("pgbouncer refuses to run as root, and running it as another user is done on Linux only")
	}
	return nil, nil
}

func chown(string, *bouncerCred) error { return nil }

func bouncerSysProcAttr(*bouncerCred) *syscall.SysProcAttr { return nil }
