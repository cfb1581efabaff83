package localpg

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// BinDir returns the directory holding the server's binaries, where the
// client tools of the same version (pg_recvlogical, pg_waldump, ...) are
// too, except in the npm builds OUTBOXRELAY_TEST_PG picks (see ClientTool).
func (s *Server) BinDir() string { return s.binDir }

// Major returns the server's major version, e.g. 17, for a test that needs
// a feature of a newer server to skip on an older one.
func (s *Server) Major() int { return s.major }

// ClientTool returns the path of a PostgreSQL client program (psql,
// pg_recvlogical, pg_basebackup, ...) to use with this server: the one
// beside the server, else the newest Debian installation's, else the one
// on PATH. The npm builds of 16-18 ship only initdb, pg_ctl and postgres,
// and an older client speaks to a newer server. The error wraps
// ErrNotInstalled, so that a test skips.
func (s *Server) ClientTool(name string) (string, error) {
	dirs := []string{s.binDir}
	if dir := highestDebianBinDir(); dir != "" {
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no PostgreSQL client program %s beside the server in %s, in Debian's /usr/lib/postgresql or on PATH (apt-get install postgresql-client): %w",
		name, s.binDir, ErrNotInstalled)
}
