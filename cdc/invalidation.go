package cdc

import (
	"fmt"
	"strings"
)

// PostgreSQL says why it invalidated a slot in
// pg_replication_slots.invalidation_reason from PostgreSQL 17. Before, a
// logical slot on a primary can only lose its WAL (wal_status lost); a
// logical slot on a standby (16) can also conflict with recovery, which 16
// does not tell apart from a loss of WAL (its conflicting is true for
// every invalidation of a logical slot).

// The invalidation reasons PostgreSQL gives.
const (
	InvalidationWALRemoved  = "wal_removed"
	InvalidationRowsRemoved = "rows_removed"
	InvalidationWALLevel    = "wal_level_insufficient"
	InvalidationIdleTimeout = "idle_timeout"
	// invalidationOnStandby16 is the reason of a slot invalidated on a
	// PostgreSQL 16 standby, which says no more.
	invalidationOnStandby16 = "wal_removed, rows_removed or wal_level_insufficient"
)

// invalidationSQL is the SQL expression, over pg_replication_slots, for
// why the server invalidated the slot on a server of the version given;
// "" while it is not invalidated.
func invalidationSQL(serverVersion int) string {
	if serverVersion >= 170000 {
		return `coalesce(invalidation_reason, '')`
	}
	return `CASE WHEN wal_status IS DISTINCT FROM 'lost' THEN '' WHEN pg_is_in_recovery() THEN '` + invalidationOnStandby16 + `' ELSE '` + InvalidationWALRemoved + `' END`
}

// invalidationWhy says what an invalidation reason means and what to do
// about it, for the slot-loss error.
func invalidationWhy(reason string) string {
	switch reason {
	case InvalidationWALRemoved:
		return "the server removed WAL the slot still needed, because the slot held back more than max_slot_wal_keep_size: raise it, or keep the relay from falling that far behind"
	case InvalidationIdleTimeout:
		return "no session read the slot for longer than idle_replication_slot_timeout (PostgreSQL 18), so the server invalidated it at a checkpoint: the relay was stopped, or could not reach the server, that long; raise the timeout (0 turns it off) or keep the relay running"
	case InvalidationRowsRemoved:
		return "the primary removed catalog rows the slot on this standby still needed: run the standby with hot_standby_feedback on and a physical slot on the primary (primary_slot_name)"
	case InvalidationWALLevel:
		return "the primary's wal_level is below logical, so a logical slot on this standby can no longer decode: set wal_level = logical on the primary"
	case invalidationOnStandby16:
		return "PostgreSQL 16 does not say which: this standby removed WAL the slot needed (max_slot_wal_keep_size), or the slot conflicted with recovery, the primary having removed catalog rows it needed (hot_standby_feedback off, or no physical slot) or lowered its wal_level below logical"
	case "":
		return "the server invalidated it (wal_status lost)"
	}
	return fmt.Sprintf("the server invalidated it (invalidation_reason %s)", strings.TrimSpace(reason))
}
