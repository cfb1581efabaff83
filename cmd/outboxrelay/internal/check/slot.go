package check

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// checkSlot reports the replication slot, and beside it, each on a line
// of its own, what decides whether PostgreSQL may take the slot away: the
// WAL it may keep (max_slot_wal_keep_size), an idle timeout
// (idle_replication_slot_timeout, PostgreSQL 18), and whether it survives
// a failover. Those two say what they say whether or not the slot exists
// yet: a relay that is stopped is when they matter.
func (c *pgCheck) checkSlot(ctx context.Context, pcfg *pgx.ConnConfig) {
	safe, exists := c.checkSlotItself(ctx, pcfg)
	c.checkWALLimit(ctx, safe, exists)
	c.checkIdleTimeout(ctx)
	if exists {
		c.checkFailover(ctx)
	} else {
		c.r.skip(CheckSlotFailover, "the slot does not exist yet")
	}
}

// checkSlotItself reports the slot: whether it exists, is the relay's kind
// and is in use, and how far behind it is. It returns the slot's
// safe_wal_size (nil when unbounded or unknown) and whether it exists.
func (c *pgCheck) checkSlotItself(ctx context.Context, pcfg *pgx.ConnConfig) (safe *int64, exists bool) {
	slot := c.cdc.Slot
	var plugin, database, walStatus string
	var lag *int64
	var pid *int32
	var temporary bool
	err := c.conn.QueryRow(ctx, `
		SELECT coalesce(plugin, ''), coalesce(database, ''), temporary, coalesce(wal_status, ''), active_pid,
		       pg_wal_lsn_diff(`+pgsql.WALEnd+`, confirmed_flush_lsn)::bigint, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &database, &temporary, &walStatus, &pid, &lag, &safe)
	if errors.Is(err, pgx.ErrNoRows) {
		var free int
		if err := c.conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`).Scan(&free); err == nil && free <= 0 {
			c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q does not exist, and every one of max_replication_slots is in use", slot),
				"drop a slot nobody reads (SELECT pg_drop_replication_slot('...')), or raise max_replication_slots and restart PostgreSQL")
			return nil, false
		}
		c.r.add(Warn, CheckSlot, fmt.Sprintf("slot %q does not exist yet; the relay creates it when it first starts, and it captures only what commits after that", slot),
			fmt.Sprintf("create it now, before the application writes events, so none is missed: SELECT pg_create_logical_replication_slot('%s', 'pgoutput'); (outboxrelay init does)", slot))
		return nil, false
	}
	if err != nil {
		c.r.add(Fail, CheckSlot, "cannot look up the slot: "+err.Error(), "")
		return nil, false
	}
	switch {
	case plugin != "pgoutput":
		c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q uses plugin %q; the relay needs pgoutput", slot, plugin), "set cdc.slot to another name, or drop this slot if nothing else reads it")
		return safe, true
	case database != pcfg.Database:
		c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q belongs to database %q, not %q", slot, database, pcfg.Database), "set cdc.slot to another name")
		return safe, true
	case walStatus == "lost":
		c.r.add(Fail, CheckSlot, fmt.Sprintf("slot %q has lost WAL it needed (wal_status lost): events committed while it fell behind are gone from it", slot),
			"drop and recreate the slot, then republish what the outbox table still holds; raise max_slot_wal_keep_size so it does not happen again")
		return safe, true
	}
	detail := fmt.Sprintf("slot %q (pgoutput), wal_status %s, %s behind the server", slot, walStatus, bytesText(lag))
	switch {
	case walStatus == "unreserved":
		c.r.add(Warn, CheckSlot, detail+"; the WAL it needs is about to be removed",
			"start the relay (or find why it is behind) now; raise max_slot_wal_keep_size")
	case pid != nil:
		c.r.add(Warn, CheckSlot, fmt.Sprintf("%s; in use by PID %d, so another relay cannot start on it", detail, *pid),
			fmt.Sprintf("nothing if that is your running relay; otherwise see SELECT * FROM pg_stat_replication WHERE pid = %d", *pid))
	case lag != nil && *lag > 1<<30:
		c.r.add(Warn, CheckSlot, detail+"; the slot holds back that much WAL on the server's disk", "start the relay, or drop the slot if it is no longer used")
	default:
		c.r.pass(CheckSlot, "%s; not in use", detail)
	}
	return safe, true
}

// checkWALLimit reports max_slot_wal_keep_size: unbounded, a stopped relay's
// slot holds WAL until the disk fills; bounded, the slot is invalidated
// once it is that far behind, and safe is how much of it is left.
func (c *pgCheck) checkWALLimit(ctx context.Context, safe *int64, exists bool) {
	var limit string
	if err := c.conn.QueryRow(ctx, `SELECT current_setting('max_slot_wal_keep_size')`).Scan(&limit); err != nil {
		c.r.add(Warn, CheckSlotWALLimit, "cannot read max_slot_wal_keep_size: "+err.Error(), "")
		return
	}
	if limit == "-1" {
		c.r.add(Warn, CheckSlotWALLimit, "max_slot_wal_keep_size is -1: while the relay is stopped or behind, its slot holds back WAL without bound, until the server's disk is full",
			"set max_slot_wal_keep_size to what the disk can spare (it takes a reload), and alert on OutboxRelaySlotWALRetained; past it PostgreSQL invalidates the slot and the relay stops on the loss, loudly")
		return
	}
	if !exists {
		c.r.pass(CheckSlotWALLimit, "max_slot_wal_keep_size is %s: a slot that far behind is invalidated, and the relay stops on the loss", limit)
		return
	}
	c.r.pass(CheckSlotWALLimit, "max_slot_wal_keep_size is %s; %s left before PostgreSQL invalidates the slot", limit, bytesText(safe))
}

// checkIdleTimeout reports idle_replication_slot_timeout (PostgreSQL 18):
// a slot nobody has read for that long is invalidated, so a relay
// stopped longer than it comes back to a lost slot.
func (c *pgCheck) checkIdleTimeout(ctx context.Context) {
	if c.facts.VersionNum < 180000 {
		c.r.skip(CheckSlotIdleTimeout, fmt.Sprintf("PostgreSQL %d has no idle_replication_slot_timeout", c.facts.VersionNum/10000))
		return
	}
	var timeout string
	if err := c.conn.QueryRow(ctx, `SELECT current_setting('idle_replication_slot_timeout')`).Scan(&timeout); err != nil {
		c.r.add(Warn, CheckSlotIdleTimeout, "cannot read idle_replication_slot_timeout: "+err.Error(), "")
		return
	}
	if timeout == "0" {
		c.r.pass(CheckSlotIdleTimeout, "idle_replication_slot_timeout is 0: an idle slot is never invalidated for being idle")
		return
	}
	c.r.add(Warn, CheckSlotIdleTimeout, fmt.Sprintf("idle_replication_slot_timeout is %s: a relay stopped (or a standby waiting) longer than that comes back to a slot PostgreSQL invalidated (idle_timeout), and stops on the loss", timeout),
		"keep the relay running, or set idle_replication_slot_timeout above the longest stop you plan; after a loss, outboxrelay backfill recovers the gap (docs/runbooks.md#outboxrelayslotlost)")
}

// checkFailover reports whether the slot survives a failover.
func (c *pgCheck) checkFailover(ctx context.Context) {
	text, ok := c.failoverText(ctx, c.cdc.Slot)
	if ok {
		c.r.pass(CheckSlotFailover, "%s", text)
		return
	}
	c.r.add(Warn, CheckSlotFailover, text,
		"on PostgreSQL 17 and later set cdc.failover_slot (docs/database.md#failover-slots); before 17 a failover loses the slot, and the relay stops on the loss until outboxrelay backfill recovers the gap")
}

// failoverText says whether the slot survives a failover: only a failover
// slot does (PostgreSQL 17 and later, synchronized to a standby with
// sync_replication_slots); before 17 no slot does, and the relay's
// checkpoint is what makes the loss loud.
func (c *pgCheck) failoverText(ctx context.Context, slot string) (string, bool) {
	if c.facts.InRecovery {
		return "a slot of this standby: a promotion of this standby keeps it, a failover to another server does not", true
	}
	version := c.facts.VersionNum
	if version < 170000 {
		return fmt.Sprintf("not a failover slot (PostgreSQL %d has none): a promoted standby does not have it, and the relay then stops on the lost slot (docs/guarantees.md#a-lost-replication-slot)", version/10000), false
	}
	var failover bool
	if err := c.conn.QueryRow(ctx, failoverQuery, slot).Scan(&failover); err != nil {
		return "whether it is a failover slot is unknown: " + err.Error(), false
	}
	if !failover {
		return "not a failover slot: a promoted standby does not have it; ALTER_REPLICATION_SLOT on a replication connection, or drop it and let the relay create it (cdc.failover_slot)", false
	}
	text, ok := c.standbySyncText(ctx)
	return "a failover slot: a standby with sync_replication_slots keeps it; " + text, ok
}

// standbySyncText says whether a standby is set up to keep the failover
// slot, as far as the primary can tell: whether a standby's slot sync
// worker is connected (sync_replication_slots on a standby), and whether
// synchronized_standby_slots holds the relay back to what a standby has.
// Without the latter, a standby promoted while behind has WAL that ends
// before the relay's checkpoint, and the relay stops on the lost slot
// rather than go on (TestFailoverSlotStandbyBehindStopsLoudly).
func (c *pgCheck) standbySyncText(ctx context.Context) (string, bool) {
	var workers int
	var standbySlots string
	var inactive []string
	err := c.conn.QueryRow(ctx, standbySyncQuery).Scan(&workers, &standbySlots, &inactive)
	if err != nil {
		return "whether a standby syncs it is unknown: " + err.Error(), false
	}
	var text string
	ok := workers > 0
	if workers > 0 {
		text = "a standby's slot sync worker is connected (sync_replication_slots)"
	} else {
		text = "no standby's slot sync worker is connected (or this role cannot see it): a promoted standby has the slot only if it runs with sync_replication_slots = on, hot_standby_feedback = on, primary_slot_name set and a dbname in primary_conninfo"
	}
	if standbySlots == "" {
		return text + "; synchronized_standby_slots is empty, so the relay may receive changes a standby has not: after a failover to that standby the relay stops on the lost slot (server behind); set synchronized_standby_slots to the standby's physical slot", false
	}
	text += fmt.Sprintf("; synchronized_standby_slots is %q: the relay receives only what those standbys have", standbySlots)
	if len(inactive) > 0 {
		text += fmt.Sprintf(", but no standby streams through %s now, and the relay receives nothing past what it has until one does (or the slot leaves the list)", strings.Join(inactive, ", "))
		ok = false
	}
	return text, ok
}

// standbySyncQuery counts the slot sync workers of standbys connected
// here (they name their connection so when primary_conninfo sets no
// application_name), and reads synchronized_standby_slots with those of
// its physical slots that no standby streams through.
const standbySyncQuery = `
	SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '%slotsync worker')::int,
	       current_setting('synchronized_standby_slots'),
	       coalesce(ARRAY(SELECT s FROM unnest(string_to_array(replace(current_setting('synchronized_standby_slots'), ' ', ''), ',')) s
	              WHERE s <> '' AND NOT EXISTS (SELECT 1 FROM pg_replication_slots r WHERE r.slot_name = s AND r.active)), '{}')`

// failoverQuery reads pg_replication_slots.failover, which PostgreSQL 17
// added.
const failoverQuery = `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`

func bytesText(n *int64) string {
	if n == nil {
		return "? bytes"
	}
	v := float64(*n)
	for _, unit := range []string{"bytes", "KiB", "MiB", "GiB"} {
		if v < 1024 || unit == "GiB" {
			if unit == "bytes" {
				return fmt.Sprintf("%d bytes", *n)
			}
			return fmt.Sprintf("%.1f %s", v, unit)
		}
		v /= 1024
	}
	return ""
}
