package localpg

import "syscall"

// sysProcAttr returns the attributes for initdb and postgres. Pdeathsig makes
// the kernel SIGKILL the postmaster when the Go process dies, so a test binary
// killed by its -timeout leaves no server behind; the postmaster's own
// children notice its death and exit. Go applies Pdeathsig after switching
// credentials, which would otherwise clear it.
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
