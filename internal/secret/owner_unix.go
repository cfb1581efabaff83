//go:build unix

package secret

import (
	"io/fs"
	"syscall"
)

// owner is the user id of the file's owner.
func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
