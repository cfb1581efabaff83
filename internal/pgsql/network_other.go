//go:build !linux

package pgsql

import (
	"syscall"
	"time"
)

// userTimeoutControl does nothing where TCP_USER_TIMEOUT does not exist;
// keepalive and the relay's own deadlines still bound a silent connection.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
