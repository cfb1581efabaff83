package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// probeMetrics gathers p alone, by metric name.
func probeMetrics(t *testing.T, p *PostgresProbe) map[string]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()[0]
	}
	return out
}

func TestPostgresProbeSlot(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	missing, err := NewPostgresProbe(url, "no_such_slot")
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	if err := missing.Check(ctx); err == nil || !strings.Contains(err.Error(), `"no_such_slot" does not exist`) {
		t.Errorf("Check of a missing slot = %v", err)
	}
	if ms := probeMetrics(t, missing); ms["outboxrelay_postgres_up"].GetGauge().GetValue() != 1 || ms["outboxrelay_replication_slot_lag_bytes"] != nil {
		t.Errorf("a missing slot: up %v, lag %v; want up and no lag", ms["outboxrelay_postgres_up"], ms["outboxrelay_replication_slot_lag_bytes"])
	}

	// The publication first: decoding looks it up as of the slot's start.
	if _, err := conn.Exec(ctx, `CREATE PUBLICATION probe_pub FOR ALL TABLES`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('probe_slot', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	// WAL written after the slot's position is lag.
	if _, err := conn.Exec(ctx, `CREATE TABLE filler AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	p, err := NewPostgresProbe(url, "probe_slot")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Check(ctx); err == nil || !strings.Contains(err.Error(), "no session streams") {
		t.Errorf("Check of an idle slot = %v, want that no session streams from it", err)
	}
	ms := probeMetrics(t, p)
	if lag := ms["outboxrelay_replication_slot_lag_bytes"].GetGauge().GetValue(); lag < 100_000 {
		t.Errorf("slot lag = %v bytes after writing 100 kB of rows, want at least that", lag)
	}
	var confirmed string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'probe_slot'`).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	want, _ := pglogrepl.ParseLSN(confirmed)
	if got := ms["outboxrelay_replication_slot_confirmed_flush_lsn"].GetGauge().GetValue(); got != float64(want) {
		t.Errorf("confirmed_flush_lsn = %v, want %v (%s)", got, float64(want), confirmed)
	}
	if ms["outboxrelay_replication_slot_active"].GetGauge().GetValue() != 0 {
		t.Error("slot reported active with no session")
	}
	if ms["outboxrelay_replication_slot_active"].GetLabel()[0].GetValue() != "probe_slot" {
		t.Errorf("slot label = %v", ms["outboxrelay_replication_slot_active"].GetLabel())
	}

	// A session streaming from the slot makes it active.
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, repl, "probe_slot", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'probe_pub'"},
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.Check(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Check with a session streaming = %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestPostgresProbeUnreachable(t *testing.T) {
	const password = "probe-Secret-81d3"
	// Port 1 on loopback: nothing listens there.
	p, err := NewPostgresProbe("postgres://relay:"+password+"@127.0.0.1:1/app?connect_timeout=1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL does not answer") {
		t.Errorf("Check = %v, want that PostgreSQL does not answer", err)
	}
	if err != nil && strings.Contains(err.Error(), password) {
		t.Errorf("Check's error shows the password: %v", err)
	}
	if up := probeMetrics(t, p)["outboxrelay_postgres_up"].GetGauge().GetValue(); up != 0 {
		t.Errorf("postgres_up = %v, want 0", up)
	}

	_, err = NewPostgresProbe("postgres://relay:"+password+"@host:notaport/app", "")
	if err == nil || strings.Contains(err.Error(), password) {
		t.Errorf("NewPostgresProbe with a bad URL = %v, want an error without the password", err)
	}
}
