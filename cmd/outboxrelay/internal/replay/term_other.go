//go:build !linux

package replay

// isTerminal is false outside Linux: the progress is written as plain
// lines there.
func isTerminal(uintptr) bool { return false }
