package cdc

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
)

// A slot is lost when it cannot carry on from the checkpoint: the server
// no longer keeps the changes committed since the checkpoint's position,
// so a slot made or moved past it starts after a gap that nothing fills.
// Creating one quietly, as a first start does, would lose those events
// without a word; the source says so instead (cdc.on_slot_loss).
//
// The checkpoint is what makes this decidable across restarts: without
// one, a slot dropped while no relay ran looks like a first start. Within
// one process the last checkpoint saved serves, even without a store.

// SlotLossCause says how a slot was found lost.
type SlotLossCause string

// The causes judge finds.
const (
	// CauseDropped: the slot is gone.
	CauseDropped SlotLossCause = "dropped"
	// CauseInvalidated: the server removed WAL the slot needed
	// (wal_status lost, max_slot_wal_keep_size).
	CauseInvalidated SlotLossCause = "invalidated"
	// CauseAhead: the slot is past the checkpoint; the relay never
	// confirms beyond it, so someone else moved or replaced the slot.
	CauseAhead SlotLossCause = "ahead"
	// CauseForeign: the only checkpoint was written by another cluster,
	// and is the relay's own past there, or cannot be told from another
	// relay's (foreign.go).
	CauseForeign SlotLossCause = "another cluster"
	// CauseBehind: the server's WAL ends before the checkpoint: restored
	// from a backup, or a standby promoted without the end of the WAL.
	CauseBehind SlotLossCause = "server behind"
	// CauseRestored: the server's WAL has passed the checkpoint, but
	// what the slot holds up to it is not what the relay received
	// (history.go): restored from a copy taken before the checkpoint,
	// and written to since.
	CauseRestored SlotLossCause = "restored"
)

// SlotLossCauses are all the causes, in the order the metrics list them.
var SlotLossCauses = []SlotLossCause{CauseDropped, CauseInvalidated, CauseAhead, CauseForeign, CauseBehind, CauseRestored}

// SlotLostError stops a relay whose slot was lost, with cdc.on_slot_loss
// fail. It is permanent: restarting finds the same slot and checkpoint.
type SlotLostError struct {
	Slot  string
	Cause SlotLossCause
	// InvalidationReason is why PostgreSQL invalidated the slot
	// (wal_removed, idle_timeout, rows_removed, wal_level_insufficient),
	// with CauseInvalidated; "" when it did not or does not say.
	InvalidationReason string
	msg                string
}

func (e *SlotLostError) Error() string { return e.msg }

// slotState is what pg_replication_slots says of the slot.
type slotState struct {
	exists    bool
	confirmed pglogrepl.LSN
	lost      bool // wal_status lost
	// invalidation is why the server invalidated it, as PostgreSQL says
	// (invalidation.go); "" when not known.
	invalidation string
	// wal is where the server's WAL ends now; 0 when not known.
	wal pglogrepl.LSN
	// historyDiffers: replayed up to the checkpoint, the slot sent what
	// the relay never received there (history.go); historyDetail says what.
	historyDiffers bool
	historyDetail  string
}

// verdict is what to do with the slot.
type verdict int

const (
	useSlot    verdict = iota // stream from it
	createSlot                // none yet, and no checkpoint: a first start
	slotLost                  // events may be missing (the cause says why)
)

// judge compares the slot with the checkpoint the source knows (nil: none
// was ever saved for this database and slot), for the relay named self.
func judge(slot slotState, known *connector.Checkpoint, self connector.CheckpointKey) (verdict, SlotLossCause) {
	switch {
	case slot.exists && slot.lost:
		return slotLost, CauseInvalidated
	case known == nil && slot.exists:
		return useSlot, ""
	case known == nil:
		return createSlot, ""
	case known.Key.SystemID != self.SystemID:
		return slotLost, CauseForeign
	case !slot.exists:
		return slotLost, CauseDropped
	case slot.wal != 0 && uint64(slot.wal) < known.EndLSN:
		// The relay confirmed a position this server's WAL has not
		// reached: it is not the server the relay read, but an earlier
		// state of it. What commits now takes positions the checkpoint
		// says were relayed, and streaming would skip it.
		return slotLost, CauseBehind
	case uint64(slot.confirmed) > known.EndLSN:
		return slotLost, CauseAhead
	case slot.historyDiffers:
		// The WAL has passed the checkpoint, but not along the history
		// the relay read: what it would skip up to the checkpoint was
		// written after a restore and never relayed.
		return slotLost, CauseRestored
	}
	return useSlot, ""
}

// reportLoss reports a lost slot: a [SlotLostError] that stops the relay
// with cdc.on_slot_loss fail, or an ERROR in the log and nil with recreate.
func (s *Source) reportLoss(slot slotState, known *connector.Checkpoint, cause SlotLossCause) error {
	s.count.loss(cause, s.cfg.OnSlotLoss != SlotLossRecreate)
	if cause == CauseForeign && known != nil {
		return s.foreignLoss(known) // foreign.go
	}
	name := s.cfg.Slot
	var what, why string
	switch cause {
	case CauseInvalidated:
		what = fmt.Sprintf("replication slot %q is invalidated (invalidation_reason %s)", name, cmp.Or(slot.invalidation, "unknown"))
		why = invalidationWhy(slot.invalidation)
	case CauseAhead:
		what = fmt.Sprintf("replication slot %q is at %s, ahead of the checkpoint", name, slot.confirmed)
		why = "the relay never confirms past its checkpoint, so someone else moved the slot (pg_replication_slot_advance, another consumer of it) or dropped it and created it again later"
	case CauseBehind:
		what = fmt.Sprintf("this server's WAL ends at %s, before the checkpoint", slot.wal)
		why = "the relay already relayed past that point, so the database was restored from a backup (same system identifier) or a standby was promoted without the end of the primary's WAL: what commits now reuses positions the checkpoint says were relayed, and streaming would skip it; " +
			"with a failover slot (PostgreSQL 17 and later), synchronized_standby_slots on the primary, naming the standby's physical slot, keeps the relay from reading past what that standby has"
	case CauseRestored:
		what = fmt.Sprintf("replication slot %q, replayed up to the checkpoint, sends what the relay never received: %s", name, slot.historyDetail)
		why = fmt.Sprintf("this server has the same system identifier and WAL past the checkpoint, but another history: it was restored from a backup or file copy taken before the checkpoint (with the slot as the copy left it, at %s) and has been written to since, "+
			"so what committed after the restore point takes positions the checkpoint says were relayed, and streaming from the checkpoint would skip it. "+
			"The events the relay published from the old history after the restore point are in Kafka but no longer in the database. "+
			"The slot still holds every change committed here since its position, so cdc.on_slot_loss: recreate, which goes on from the slot as it is, relays them all (those before the restore point again) with no gap", slot.confirmed)
	default:
		what = fmt.Sprintf("replication slot %q is gone", name)
		why = "it was probably dropped (pg_drop_replication_slot, often to free WAL), lost in a failover to a standby that had no copy of it (before PostgreSQL 17 none has; from 17 a standby with sync_replication_slots keeps a failover slot, cdc.failover_slot), or the database was restored from a backup"
	}
	since := "since the slot's last known position"
	if known != nil {
		since = fmt.Sprintf("after %s, the checkpoint of what Kafka acknowledged", pglogrepl.LSN(known.EndLSN))
		if !known.CommitTime.IsZero() {
			since += fmt.Sprintf(" (the last event relayed was committed at %s)", known.CommitTime.UTC().Format(time.RFC3339Nano))
		}
	}
	msg := fmt.Sprintf("%s: %s; events committed %s may never reach Kafka", what, why, since)
	attrs := []any{"slot", name, "cause", string(cause)}
	if cause == CauseInvalidated {
		attrs = append(attrs, "invalidation_reason", slot.invalidation)
	}
	if known != nil {
		attrs = append(attrs, "checkpoint_lsn", pglogrepl.LSN(known.EndLSN).String(), "checkpoint_commit_time", known.CommitTime)
	}
	if s.cfg.OnSlotLoss == SlotLossRecreate {
		since := "the checkpoint_commit_time below"
		if known != nil && !known.CommitTime.IsZero() {
			since = known.CommitTime.UTC().Format(time.RFC3339Nano)
		}
		s.log.Error(msg+"; cdc.on_slot_loss is recreate, so the relay goes on from the slot as it is (creating one if it is gone) and checkpoints there. "+
			"To publish the outbox rows of the gap that the table still holds, stop the relay and run "+s.backfillCommand("--since "+since)+
			" (their id headers let consumers drop repeats; see docs/runbooks.md#outboxrelayslotlost)", attrs...)
		return nil
	}
	err := &SlotLostError{Slot: name, Cause: cause, InvalidationReason: slot.invalidation, msg: fmt.Sprintf("%s. The relay stops rather than go on past the gap (cdc.on_slot_loss: fail); it creates no slot. "+
		"To go on: stop the relay and run %s, which publishes the outbox rows of the gap that the table still holds "+
		"(their id headers let consumers drop repeats) and leaves the slot and checkpoint where the relay carries on, then start the relay; "+
		"or, to go on past the gap without them, start once with cdc.on_slot_loss: recreate. See docs/runbooks.md#outboxrelayslotlost", msg, s.backfillCommand("--after-checkpoint"))}
	s.log.Error("replication slot lost; relaying stopped", append(attrs, "err", err.Error())...)
	return connector.Permanent(err)
}

// rowsBefore counts the rows each outbox table holds before a slot is
// created, for warnRowsBefore: counted before, not after, so that a row
// committed after the slot's consistent point, which the slot does
// relay, is never among them (a standby replays such rows while the
// creation returns). -1 for a table that cannot be counted.
func (s *Source) rowsBefore(ctx context.Context, conn *pgx.Conn) []int64 {
	counts := make([]int64, len(s.tables))
	for i, t := range s.tables {
		counts[i] = s.countRows(ctx, conn, t)
	}
	return counts
}

// warnRowsBefore says, when a new slot was created over tables that held
// rows (counts, from rowsBefore), that those rows were committed before
// the slot existed and are not relayed: a slot captures only what commits
// after it.
func (s *Source) warnRowsBefore(counts []int64) {
	for i, n := range counts {
		s.warnTableRows(s.tables[i], n, "the outbox table already holds rows committed before the replication slot existed; they are not relayed, only what commits from now on is")
	}
}

// mostCounted bounds countRows: a count is "more than" this.
const mostCounted = 100000

// countRows counts t's rows, up to one more than mostCounted; -1 when it
// cannot.
func (s *Source) countRows(ctx context.Context, conn *pgx.Conn, t table) int64 {
	var n int64
	q := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d) t`, t.ident(), mostCounted+1)
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		s.log.Debug("count the rows already in the outbox table", "table", t.String(), "err", err)
		return -1
	}
	return n
}

// warnTableRows warns, with what, that t holds n rows (from countRows)
// the slot will not relay; nothing for none, or a count that failed.
func (s *Source) warnTableRows(t table, n int64, what string) {
	if n <= 0 {
		return
	}
	count := fmt.Sprint(n)
	if n > mostCounted {
		count = fmt.Sprintf("more than %d", mostCounted)
	}
	s.log.Warn(what, "slot", s.cfg.Slot, "table", t.String(), "rows", count,
		"hint", "if they must reach Kafka, stop the relay and publish them once with outboxrelay backfill --all, or start with a new slot and cdc.snapshot: initial, which publishes the rows already in the table when it creates the slot")
}
