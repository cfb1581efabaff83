package localpg

// BinDir returns the directory holding the server's binaries, where the
// client tools of the same version (pg_recvlogical, pg_waldump, ...) are
// too.
func (s *Server) BinDir() string { return s.binDir }

// Major returns the server's major version, e.g. 17, for a test that needs
// a feature of a newer server to skip on an older one.
func (s *Server) Major() int { return s.major }
