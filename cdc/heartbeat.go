package cdc

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// HeartbeatPrefix is the prefix of the logical decoding messages the
// heartbeat writes; a consumer of the slot with messages turned on can tell
// them apart by it.
const HeartbeatPrefix = "outboxrelay-heartbeat"

// heartbeatSQL writes a non-transactional logical decoding message: a WAL
// record of a few bytes in this database, written at once, not at a commit.
// pgoutput does not send messages unless asked (messages 'true'), so the
// slot's decoding passes over it, and the server's next keepalive carries a
// position past it, which the source confirms when nothing is in flight.
// That is what moves the slot when the outbox table is idle and nothing
// else in this database writes, while other databases on the server fill
// WAL that the slot would otherwise hold on to.
const heartbeatSQL = `SELECT pg_logical_emit_message(false, '` + HeartbeatPrefix + `', '')`

// heartbeat writes a message every HeartbeatInterval on a connection of
// its own, never the replication connection, and then runs
// cdc.heartbeat_query when set, until ctx ends. A failure is logged and
// tried again at the next tick: a missing heartbeat only lets WAL pile up
// for a while, which is no reason to stop relaying.
func (s *Source) heartbeat(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			pgsql.Close(ctx, conn)
		}
	}()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	var beat, query failureLog
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		conn, err = s.beat(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			err = classify("write heartbeat", err)
			if beat.failed(err) {
				s.log.Warn("heartbeat failed; trying again every interval", "slot", s.cfg.Slot, "err", err, "interval", s.cfg.HeartbeatInterval)
			}
			continue
		}
		if beat.recovered() {
			s.log.Info("heartbeat works again", "slot", s.cfg.Slot)
		}
		if s.cfg.HeartbeatQuery == "" {
			continue
		}
		conn, err = s.heartbeatQuery(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if query.failed(err) {
				// Debezium logs "Could not execute heartbeat action" at
				// ERROR too (DatabaseHeartbeatImpl); it fails the task on
				// undefined_table, the relay goes on relaying the outbox,
				// which the query does not touch.
				var pe *pgconn.PgError
				code := ""
				if errors.As(err, &pe) {
					code = pe.Code
				}
				s.log.Error("cdc.heartbeat_query failed; relaying goes on, and the query runs again at the next heartbeat: fix the query or what it writes to",
					"slot", s.cfg.Slot, "sqlstate", code, "err", err, "interval", s.cfg.HeartbeatInterval)
			}
		} else if query.recovered() {
			s.log.Info("cdc.heartbeat_query works again", "slot", s.cfg.Slot)
		}
	}
}

// failureLog says when a repeated failure is worth a log line: when it
// starts, when its reason changes, and once a minute while it goes on,
// not at every tick.
type failureLog struct {
	last string
	at   time.Time
}

func (f *failureLog) failed(err error) bool {
	if err.Error() == f.last && time.Since(f.at) < time.Minute {
		return false
	}
	f.last, f.at = err.Error(), time.Now()
	return true
}

// recovered reports whether the last attempt had failed, and forgets it.
func (f *failureLog) recovered() bool {
	was := f.last != ""
	f.last = ""
	return was
}

// heartbeatQuery runs cdc.heartbeat_query on conn, which beat has just
// used. Without arguments pgx sends it with the simple protocol, so
// several statements separated by semicolons run as one implicit
// transaction, as Debezium's JDBC execute and commit does. On an error
// the server rolled the transaction back and the connection stays usable,
// unless it is the connection that failed: then nil is returned, and the
// next heartbeat connects again.
func (s *Source) heartbeatQuery(ctx context.Context, conn *pgx.Conn) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.HeartbeatInterval, 10*time.Second))
	defer cancel()
	if _, err := conn.Exec(ctx, s.cfg.HeartbeatQuery); err != nil {
		var pe *pgconn.PgError
		// A query that opened a transaction of its own may leave it
		// aborted: a fresh connection is simpler than a ROLLBACK.
		if !errors.As(err, &pe) || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
			conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return conn, err
	}
	s.log.Debug("heartbeat query", "slot", s.cfg.Slot)
	return conn, nil
}

// beat writes one heartbeat message, connecting first when conn is nil. It
// returns the connection to use next time: nil after an error, so the next
// beat starts on a fresh one.
func (s *Source) beat(ctx context.Context, conn *pgx.Conn) (*pgx.Conn, error) {
	// Bounded, so a hung server cannot pile up beats.
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.HeartbeatInterval, 10*time.Second))
	defer cancel()
	if conn == nil {
		var err error
		if conn, err = pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network, pgsql.Param("application_name", "outboxrelay-heartbeat")); err != nil {
			return nil, err
		}
	}
	var lsn string
	if err := conn.QueryRow(ctx, heartbeatSQL).Scan(&lsn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	s.log.Debug("heartbeat", "slot", s.cfg.Slot, "lsn", lsn)
	return conn, nil
}
