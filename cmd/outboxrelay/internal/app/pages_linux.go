package app

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseBinaryPages unmaps from the process the pages of its binary that
// are mapped read-only (its code, read-only data and the runtime's tables),
// with MADV_DONTNEED, and returns how much of the binary was resident
// before.
//
// A private file mapping that was never written loses nothing: the next
// touch of a page maps it again from the page cache, a minor fault. The
// binary's writable segment is left alone, since MADV_DONTNEED would undo
// what the process wrote there.
func releaseBinaryPages() (held int64, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	if held, err = residentFile(); err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(maps)) {
		start, end, ok := readOnlyMapping(strings.TrimSuffix(line, "\n"), exe)
		if !ok {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); errno != 0 {
			return held, fmt.Errorf("madvise(MADV_DONTNEED) of %s's pages at %#x-%#x: %w", exe, start, end, errno)
		}
	}
	return held, nil
}

// readOnlyMapping parses a line of /proc/self/maps, "start-end perms
// offset dev inode path", and returns the range when it maps path and is
// not writable.
func readOnlyMapping(line, path string) (start, end uint64, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 6 || strings.Contains(fields[1], "w") {
		return 0, 0, false
	}
	// The path is what follows the inode, spaces and all.
	rest := line
	for range 5 {
		rest = strings.TrimLeft(rest, " ")
		rest = rest[strings.IndexByte(rest, ' ')+1:]
	}
	if strings.TrimLeft(rest, " ") != path {
		return 0, 0, false
	}
	lo, hi, found := strings.Cut(fields[0], "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	return start, end, err1 == nil && err2 == nil && end > start
}

// residentFile is the process's resident memory backed by files, which for
// a static binary is its own pages: RssFile of /proc/self/status.
func residentFile() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("no RssFile in /proc/self/status")
}
