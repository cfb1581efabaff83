//go:build !linux

package localpg

import "os"

// killTree SIGKILLs the postmaster; its children exit once they notice.
func killTree(p *os.Process) error { return p.Kill() }
