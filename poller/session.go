package poller

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A connection that dies without a word (a NAT or firewall forgot it, a
// proxy cut it) leaves its session alive on the server, which goes on
// answering the keepalives of whatever sits in between. A claim's session
// holds its rows and buckets in an open transaction, and the listener's
// holds this instance's member lock, until the server ends it after
// idle_in_transaction_session_timeout (two minutes by default; the
// listener's, never). The poller knows which sessions it gave up on, so it
// ends them itself from a fresh connection, and their rows are claimed
// again at once.

// session names one server backend: its pid, and when it started (in
// microseconds since the epoch), since the server hands a pid to a new
// session once the old one is gone.
type session struct {
	pid     uint32
	started int64
}

// sessionStartSQL is the session running it, its pid and when it
// started; identify and the listener's connect ask it. The pid is the
// server's word, not the connection's BackendKeyData, which a pooler in
// between (PgBouncer, in session pooling mode) makes up.
const sessionStartSQL = `SELECT pid, (extract(epoch FROM backend_start) * 1000000)::int8 FROM pg_stat_activity WHERE pid = pg_backend_pid()`

// identify asks the server which session conn is, and when it started. A
// session it cannot identify is left to the server's timeout if its
// connection dies.
func (s *Source) identify(ctx context.Context, conn *pgconn.PgConn) session {
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	res, err := conn.Exec(qctx, sessionStartSQL).ReadAll()
	if err != nil || len(res) != 1 {
		s.log.Debug("could not identify the session; if its connection dies, the server's timeout ends it", "err", err)
		return session{}
	}
	return sessionFrom(res[0])
}

// sessionFrom reads a session from the result of sessionStartSQL.
func sessionFrom(res *pgconn.Result) session {
	if len(res.Rows) != 1 || res.Rows[0][0] == nil || res.Rows[0][1] == nil {
		return session{}
	}
	pid, err := strconv.ParseUint(string(res.Rows[0][0]), 10, 32)
	if err != nil {
		return session{}
	}
	started, err := strconv.ParseInt(string(res.Rows[0][1]), 10, 64)
	if err != nil {
		return session{}
	}
	return session{pid: uint32(pid), started: started}
}

// endSessions ends the sessions on the server from a fresh connection and
// waits, a few seconds at most, until they are gone, so that their locks
// are free when the poller claims again. Ending a session needs the same
// role or pg_signal_backend; without, or when the server cannot be
// reached, it says so and the server's own timeout ends them. whose says
// whose sessions they are, for the log.
func (s *Source) endSessions(ctx context.Context, whose string, sessions []session) {
	var pids, starts []int64
	for _, ss := range sessions {
		if ss.pid != 0 {
			pids, starts = append(pids, int64(ss.pid)), append(starts, ss.started)
		}
	}
	if len(pids) == 0 {
		return
	}
	fail := func(err error) {
		s.log.Warn("could not end the "+whose+" sessions whose connections went silent; they keep their locks until the server ends them",
			"table", s.cfg.Table, "pids", pids, "idle_in_transaction_session_timeout", idleInTxTimeout(s.cfg.Network).String(), "err", err,
			"hint", "the relay's role may end sessions of its own role; for others grant it pg_signal_backend")
	}
	conn, err := s.connect(ctx, false)
	if err != nil {
		fail(err)
		return
	}
	defer closeConn(ctx, conn)
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	// The start time tells a session from a later one that got its pid.
	const match = ` FROM pg_stat_activity a JOIN unnest($1::int8[], $2::int8[]) AS d(pid, started)
		ON a.pid = d.pid AND (extract(epoch FROM a.backend_start) * 1000000)::int8 = d.started`
	var ended int
	if err := conn.QueryRow(qctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))`+match, pids, starts).Scan(&ended); err != nil {
		fail(classify("end the sessions", err))
		return
	}
	// pg_terminate_backend only signals: the locks go once the backend has
	// rolled back and exited, which takes milliseconds.
	for range 250 {
		var left int
		if err := conn.QueryRow(qctx, `SELECT count(*)`+match, pids, starts).Scan(&left); err != nil || left == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.log.Warn("ended the "+whose+" sessions whose connections went silent, so that what they held is free at once",
		"table", s.cfg.Table, "pids", pids, "ended", ended)
}
