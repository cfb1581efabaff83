package localpg

// BinDir returns the directory holding the server's binaries, where the
// client tools of the same version (pg_recvlogical, pg_waldump, ...) are
// too.
func (s *Server) BinDir() string { return s.binDir }
