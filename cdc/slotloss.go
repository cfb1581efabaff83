package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
)

// A slot is lost when it disappears, or is invalidated, while the relay
// knows a position in it: the server no longer keeps the changes committed
// since that position, so a new slot starts after a gap that nothing
// fills. Creating one quietly, as a first start does, would lose those
// events without a word; the source says so instead (cdc.on_slot_loss).
//
// Within one process the source knows it had the slot (hadSlot). Across a
// restart it does not: a slot dropped while no relay ran looks like a first
// start. An invalidated slot is known for lost whenever it is seen.

type slotLossCause int

const (
	causeDropped slotLossCause = iota
	causeInvalidated
)

// SlotLosses counts the slot losses the source has detected, with either
// cdc.on_slot_loss.
func (s *Source) SlotLosses() int64 { return s.slotLosses.Load() }

// slotLost reports a lost slot: an error that stops the relay with
// cdc.on_slot_loss fail, or an ERROR in the log and nil with recreate.
func (s *Source) slotLost(what string, cause slotLossCause) error {
	s.slotLosses.Add(1)
	since := fmt.Sprintf("after %s, the last position Kafka acknowledged", s.ConfirmedLSN())
	if ns := s.published.Load(); ns != 0 {
		since += fmt.Sprintf(" (the last event relayed was committed at %s)", time.Unix(0, ns).UTC().Format(time.RFC3339Nano))
	}
	var why string
	switch cause {
	case causeInvalidated:
		why = "the server removed WAL the slot still needed, because the slot held back more than max_slot_wal_keep_size"
	default:
		why = "it was probably dropped (pg_drop_replication_slot, often to free WAL), lost in a failover to a standby that had no copy of it, or the database was restored from a backup"
	}
	msg := fmt.Sprintf("%s: %s; events committed %s may never reach Kafka", what, why, since)
	if s.cfg.OnSlotLoss == SlotLossRecreate {
		s.log.Error(msg+"; cdc.on_slot_loss is recreate, so a new slot is created and the relay goes on: publish the outbox rows committed in the gap again (their id headers let consumers drop the ones they have)",
			"slot", s.cfg.Slot, "acknowledged_lsn", s.ConfirmedLSN().String())
		return nil
	}
	return connector.Permanent(fmt.Errorf("%s. The relay stops rather than create a new slot past the gap (cdc.on_slot_loss: fail). "+
		"To go on: find the outbox rows committed in the gap and publish them again (their id headers let consumers drop repeats), "+
		"then restart with cdc.on_slot_loss: recreate, or drop the slot yourself and start again; see docs/guarantees.md#a-lost-replication-slot", msg))
}

// warnRowsBefore says, when a new slot is created over a table that holds
// rows, that those rows were committed before the slot existed and are not
// relayed: a slot captures only what commits after it.
func (s *Source) warnRowsBefore(ctx context.Context, conn *pgx.Conn) {
	const most = 100000
	var n int64
	q := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d) t`, pgx.Identifier{s.schema, s.table}.Sanitize(), most+1)
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		s.log.Debug("count the rows already in the outbox table", "err", err)
		return
	}
	if n == 0 {
		return
	}
	count := fmt.Sprint(n)
	if n > most {
		count = fmt.Sprintf("more than %d", most)
	}
	s.log.Warn("the outbox table already holds rows committed before the replication slot existed; they are not relayed, only what commits from now on is",
		"slot", s.cfg.Slot, "table", s.cfg.Table, "rows", count,
		"hint", "if they must reach Kafka, publish them once by other means; a table that keeps published rows (source: poll) does not have this gap")
}
