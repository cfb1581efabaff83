//go:build !unix

package localpg

import (
	"os"
	"syscall"
)

// credential is never set where there are no Unix users to switch to.
type credential struct{ Uid, Gid uint32 }

// quitSignal: only Unix has an immediate-shutdown signal.
var quitSignal = os.Kill

func serverCredential() (*credential, error) { return nil, nil }

func sysProcAttr(*credential) *syscall.SysProcAttr { return nil }

func checkReachable(string, *credential) error { return nil }
