package check_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/localpg"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestSlotRisksOnLinesOfTheirOwn: what may take the slot away is reported
// on WARN lines of its own, whether or not the slot exists yet, since a
// relay that is stopped is when it matters.
func TestSlotRisksOnLinesOfTheirOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("no slot yet, unbounded WAL", func(t *testing.T) {
		s := newSetup(ctx, t, testenv.Postgres(t))
		cfg, _ := s.config(t)
		r, table := run(ctx, t, cfg)
		expect(t, r, check.CheckSlot, check.Warn, "does not exist yet")
		expect(t, r, check.CheckSlotWALLimit, check.Warn, "max_slot_wal_keep_size is -1", "OutboxRelaySlotWALRetained")
		expect(t, r, check.CheckSlotFailover, check.Skip, "does not exist yet")
		onlyFailures(t, r)
		if !containsLine(table, "WARN", check.CheckSlotWALLimit) {
			t.Errorf("no WARN line of its own for %s:\n%s", check.CheckSlotWALLimit, table)
		}
	})

	t.Run("bounded WAL", func(t *testing.T) {
		srv, err := localpg.Start(ctx, localpg.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1GB"}})
		if errors.Is(err, localpg.ErrNotInstalled) {
			t.Skipf("needs PostgreSQL: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		dbURL, err := srv.CreateDatabase(ctx, "app")
		if err != nil {
			t.Fatal(err)
		}
		s := newSetup(ctx, t, dbURL)
		s.exec(ctx, t, `SELECT pg_create_logical_replication_slot('outboxrelay', 'pgoutput')`)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckSlot, check.Pass, "pgoutput")
		expect(t, r, check.CheckSlotWALLimit, check.Pass, "max_slot_wal_keep_size is 1GB", "left before PostgreSQL invalidates the slot")
	})

	t.Run("idle timeout on PostgreSQL 18", func(t *testing.T) {
		t.Setenv(localpg.MajorEnv, "18")
		srv, err := localpg.Start(ctx, localpg.Options{Settings: map[string]string{"idle_replication_slot_timeout": "1h"}})
		if errors.Is(err, localpg.ErrNotInstalled) {
			t.Skipf("needs PostgreSQL 18 (scripts/fetch-postgres 18): %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		dbURL, err := srv.CreateDatabase(ctx, "app")
		if err != nil {
			t.Fatal(err)
		}
		s := newSetup(ctx, t, dbURL)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckSlotIdleTimeout, check.Warn, "idle_replication_slot_timeout is 1h", "invalidated (idle_timeout)", "backfill")
	})
}

// containsLine reports whether the table has a line starting with status
// and naming check.
func containsLine(table, status, check string) bool {
	for line := range strings.Lines(table) {
		if strings.HasPrefix(line, status) && strings.Contains(line, check) {
			return true
		}
	}
	return false
}
