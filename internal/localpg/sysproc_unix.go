//go:build unix && !linux

package localpg

import "syscall"

// sysProcAttr returns the attributes for initdb and postgres. Only Linux has a
// parent-death signal: elsewhere a killed Go process leaves the server
// running.
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
