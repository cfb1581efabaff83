package localpg

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// killTree SIGKILLs the postmaster and its children (backends, WAL senders,
// background workers), as a crash of the host would. Killing only the
// postmaster leaves backends serving their clients until they next wait, so
// a test could not tell that the database went away; and until they exit, a
// new postmaster refuses to start on the same data.
//
// SIGSTOP first freezes the postmaster so it cannot fork a child between
// the listing and the kill.
func killTree(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	children := childPIDs(p.Pid)
	if err := p.Kill(); err != nil {
		return err
	}
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}

// childPIDs lists the processes whose parent is ppid, from /proc.
func childPIDs(ppid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, path := range stats {
		stat, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		// After "pid (comm) state " comes the ppid; comm may hold spaces
		// and parentheses, so split after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(stat[i+1:])
		if len(fields) < 2 || string(fields[1]) != strconv.Itoa(ppid) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
