package cdc

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/pgsql"
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

// startHeartbeat starts the heartbeat when cfg.HeartbeatInterval is
// positive; the returned function stops it and waits for it to exit.
func (s *Source) startHeartbeat(ctx context.Context) (stop func()) {
	if s.cfg.HeartbeatInterval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.heartbeat(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// heartbeat writes a message every HeartbeatInterval on a connection of
// its own, never the replication connection, until ctx ends. A failure is
// logged and tried again at the next tick: a missing heartbeat only lets
// WAL pile up for a while, which is no reason to stop relaying.
func (s *Source) heartbeat(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			pgsql.Close(ctx, conn)
		}
	}()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	// A failing heartbeat is logged when it starts failing, when the
	// reason changes, and once a minute while it goes on: not every tick.
	var lastErr string
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		conn, err = s.beat(ctx, conn)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			err = classify("write heartbeat", err)
			if err.Error() != lastErr || time.Since(lastLog) >= time.Minute {
				lastErr, lastLog = err.Error(), time.Now()
				s.log.Warn("heartbeat failed; trying again every interval", "slot", s.cfg.Slot, "err", err, "interval", s.cfg.HeartbeatInterval)
			}
		case lastErr != "":
			lastErr = ""
			s.log.Info("heartbeat works again", "slot", s.cfg.Slot)
		}
	}
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
