package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
)

// sourceKinds are the sources the behavioural suite runs against.
var sourceKinds = []sourceKind{cdcKind, pollKind}

var cdcKind = sourceKind{
	name: "cdc",
	open: func(t testing.TB, url, table, name string) connector.Source {
		return openCDC(t, cdc.Config{URL: url, Table: "public." + table, Slot: name, Publication: name})
	},
	ready: func(ctx context.Context, t testing.TB, pool *pgxpool.Pool, name string) {
		waitSlotActive(ctx, t, pool, name)
	},
	features: Features{
		// A graceful stop confirms exactly what Kafka acknowledged.
		GracefulRestartRepeatsNothing: true,
		ExactlyOnce:                   true,
		// The checkpoint is written in the Kafka transaction it covers.
		ExactlyOnceKillRepeats: 0,
	},
	backlog: func(t *testing.T, e *env) connector.Source {
		return e.snapshotSource(t, &syncBuffer{})
	},
	prepare: func(testing.TB, string) {},
	binaryConfig: func(url string, brokers []string, name string) string {
		return yamlConfig(url, brokers, cdcYAML(name))
	},
	started:  "replication started",
	deadConn: deadConnSigns{warning: "the replication connection is dead", bound: "silent_for", within: 2 * time.Minute},
}

func openCDC(t testing.TB, cfg cdc.Config) *cdc.Source {
	t.Helper()
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 100 * time.Millisecond
	}
	src, err := cdc.New(cfg, cdc.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("cdc source: %v", err)
	}
	return src
}

// waitSlotReleased waits until no session holds the slot: a stopped
// relay's walsender may still be on its way out.
func waitSlotReleased(ctx context.Context, t testing.TB, pool *pgxpool.Pool, slot string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var held bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL)`, slot).Scan(&held); err != nil {
			t.Fatalf("look up slot %s: %v", slot, err)
		}
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s is still held 30s after its relay stopped", slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotHolder waits until a walsender streams from the slot and returns
// its PID: the slot is also held, briefly, by the session that creates it.
func slotHolder(ctx context.Context, t testing.TB, pool *pgxpool.Pool, slot string) int32 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var pid int32
		err := pool.QueryRow(ctx, `SELECT s.active_pid FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, slot).Scan(&pid)
		if err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no walsender streams from slot %s after 30s: %v", slot, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSlotActive waits until a walsender streams from the slot: from then
// on, every commit is captured.
func waitSlotActive(ctx context.Context, t testing.TB, pool *pgxpool.Pool, slot string) {
	t.Helper()
	slotHolder(ctx, t, pool, slot)
}
