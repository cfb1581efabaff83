package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// A hot standby as the source (PostgreSQL 16 and later decode on a
// standby). The relay reads there and writes nothing: a standby accepts no
// writes, so the publication comes from the primary, and the heartbeat,
// which writes a WAL record, cannot run. The slot is created on the
// standby, where creating it waits for the primary to log the
// transactions running (every 15 s while it writes; pg_log_standby_snapshot()
// on the primary at once). Everything else holds as on a primary: the
// checkpoint is in Kafka, and the slot is judged against it, the server's
// WAL end being its replayed position (pgsql.WALEnd). A promotion of that
// standby keeps its slot.

// checkStandby refuses what cannot work on a standby, and warns once of
// what makes its slot fragile.
func (s *Source) checkStandby(ctx context.Context, conn *pgx.Conn, facts pgsql.Facts) error {
	s.server.onHotStandby = facts.InRecovery
	if !facts.InRecovery {
		return nil
	}
	if err := facts.StandbySource().Err(); err != nil {
		return err
	}
	if s.cfg.HeartbeatInterval > 0 {
		return connector.Permanent(fmt.Errorf("cdc.heartbeat_interval is %s, but the server at postgres.url is a standby, which takes no writes, the heartbeat's pg_logical_emit_message among them: "+
			"set cdc.heartbeat_interval to 0 (the slot moves on with what the primary writes), or point postgres.url at the primary", s.cfg.HeartbeatInterval))
	}
	if s.server.hotStandbyLogged {
		return nil
	}
	s.server.hotStandbyLogged = true
	var feedback, primarySlot string
	if err := conn.QueryRow(ctx, `SELECT current_setting('hot_standby_feedback'), current_setting('primary_slot_name')`).Scan(&feedback, &primarySlot); err != nil {
		return classify("read the standby's settings", err)
	}
	s.log.Info("the server is a hot standby: decoding there; the relay writes nothing to it, and a slot it creates there is no failover slot (a standby makes none)", "slot", s.cfg.Slot)
	if feedback != "on" || primarySlot == "" {
		s.log.Warn("the standby the relay reads from runs without hot_standby_feedback or a primary_slot_name: the primary may remove catalog rows the relay's slot still needs, and the standby then invalidates the slot, which stops the relay on a lost slot",
			"slot", s.cfg.Slot, "hot_standby_feedback", feedback, "primary_slot_name", primarySlot,
			"hint", "on the standby set hot_standby_feedback = on and primary_slot_name to a physical slot on the primary")
	}
	return nil
}

// standbyPublicationError says that the publication lacks what the relay
// would add (missing: all of it; else a table), which a standby cannot
// do, and gives the SQL to run on the primary.
func (s *Source) standbyPublicationError(what, sql string) error {
	return connector.Permanent(fmt.Errorf("%s, and the server at postgres.url is a standby, which takes no writes: run on the primary %s", what, sql))
}
