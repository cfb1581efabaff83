package integration

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outboxrelay/outboxrelay/internal/metrics"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestSlotHeadroomMetrics: a cdc relay exports how much longer PostgreSQL
// keeps its slot's WAL. With max_slot_wal_keep_size set, the safe WAL is
// about that setting's bytes (PostgreSQL counts whole WAL segments of
// 16 MiB, from the segment the slot needs), and wal_status is reserved; with the default -1 the safe WAL is +Inf (documented so: no
// "less than" alert fires on it) and the setting reads -1. On PostgreSQL
// 17 and later the slot says whether it is a failover slot.
func TestSlotHeadroomMetrics(t *testing.T) {
	const keep = 64 << 20
	t.Run("bounded", func(t *testing.T) {
		srv := testenv.PostgresServerWith(t, map[string]string{"max_slot_wal_keep_size": "64MB"})
		mfs := scrapeSlotRelay(t, srv.URL("postgres"))
		slot := slotLabel(t, mfs)
		safe, ok := value(mfs, "outboxrelay_replication_slot_safe_wal_size_bytes", "slot", slot)
		const segments = 2 * 16 << 20
		if !ok || safe < keep-segments || safe > keep+segments {
			t.Errorf("safe_wal_size = %v (exported: %v), want %d give or take two WAL segments", safe, ok, keep)
		}
		if v, _ := value(mfs, "outboxrelay_replication_slot_max_wal_keep_size_bytes", "slot", slot); v != keep {
			t.Errorf("max_wal_keep_size = %v, want %d", v, keep)
		}
		checkWALStatus(t, mfs, slot, "reserved")
		checkFailoverGauge(t, mfs, slot, srv.URL("postgres"))
	})
	t.Run("unbounded", func(t *testing.T) {
		url := testenv.Postgres(t)
		mfs := scrapeSlotRelay(t, url)
		slot := slotLabel(t, mfs)
		if safe, ok := value(mfs, "outboxrelay_replication_slot_safe_wal_size_bytes", "slot", slot); !ok || !math.IsInf(safe, 1) {
			t.Errorf("safe_wal_size = %v (exported: %v), want +Inf with max_slot_wal_keep_size -1", safe, ok)
		}
		if v, _ := value(mfs, "outboxrelay_replication_slot_max_wal_keep_size_bytes", "slot", slot); v != -1 {
			t.Errorf("max_wal_keep_size = %v, want -1", v)
		}
		checkWALStatus(t, mfs, slot, "reserved")
	})
}

// scrapeSlotRelay runs a cdc relay on the database at url, relays a few
// events so that the slot has been read, and returns /metrics.
func scrapeSlotRelay(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := context.Background()
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	a := startApp(t, map[string]string{
		"postgres.url": url, "outbox.table": "public.outbox", "kafka.brokers": strings.Join(brokers, ","),
		"cdc.slot": name, "cdc.publication": name, "cdc.status_interval": "100ms", "http.listen": "127.0.0.1:0",
	})
	workload{table: "outbox", writers: 1, aggregates: 2, events: 10}.write(ctx, t, pool)
	deadline := time.Now().Add(time.Minute)
	for {
		mfs := a.scrape(t)
		if n, _ := value(mfs, "outboxrelay_events_published_total", "topic", "outbox.event.order"); n == 10 {
			if _, ok := mfs["outboxrelay_replication_slot_wal_status"]; ok {
				a.waitStatus(t, "/readyz", http.StatusOK, time.Minute)
				return mfs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("within a minute, not every event published or no wal_status exported:\n%s", a.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slotLabel is the slot the relay's probe reports on.
func slotLabel(t *testing.T, mfs map[string]*dto.MetricFamily) string {
	t.Helper()
	mf := mfs["outboxrelay_replication_slot_active"]
	if mf == nil || len(mf.GetMetric()) != 1 {
		t.Fatalf("want one outboxrelay_replication_slot_active series, got %v", mf)
	}
	for _, l := range mf.GetMetric()[0].GetLabel() {
		if l.GetName() == "slot" {
			return l.GetValue()
		}
	}
	t.Fatal("outboxrelay_replication_slot_active has no slot label")
	return ""
}

// checkWALStatus: one series per status, 1 for want and 0 for the others.
func checkWALStatus(t *testing.T, mfs map[string]*dto.MetricFamily, slot, want string) {
	t.Helper()
	for _, s := range metrics.WALStatuses {
		v, ok := value(mfs, "outboxrelay_replication_slot_wal_status", "slot", slot, "status", s)
		if wantV := map[bool]float64{true: 1, false: 0}[s == want]; !ok || v != wantV {
			t.Errorf("wal_status{status=%q} = %v (exported: %v), want %v", s, v, ok, wantV)
		}
	}
}

// checkFailoverGauge: the failover gauge is there from PostgreSQL 17 on,
// 1 for the slot the relay made (cdc.failover_slot defaults to true
// there), and absent before; synced is absent on a primary.
func checkFailoverGauge(t *testing.T, mfs map[string]*dto.MetricFamily, slot, url string) {
	t.Helper()
	major := serverMajor(context.Background(), t, url)
	v, ok := value(mfs, "outboxrelay_replication_slot_failover", "slot", slot)
	switch {
	case major >= 17 && (!ok || v != 1):
		t.Errorf("PostgreSQL %d: failover = %v (exported: %v), want 1", major, v, ok)
	case major < 17 && ok:
		t.Errorf("PostgreSQL %d has no failover slots, yet failover = %v", major, v)
	}
	if _, ok := mfs["outboxrelay_replication_slot_synced"]; ok {
		t.Errorf("synced exported on a primary")
	}
}
