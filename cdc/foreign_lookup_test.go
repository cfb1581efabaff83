package cdc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestJudgeForeignLooksUpTheRow: what JudgeForeign finds of another
// cluster's checkpoint's last event in a real outbox table, a uuid column:
// a row (moved), no row while the table holds others, also for an id that
// is no uuid (another relay's), nothing to go by in an empty table or with
// cdc.cleanup (its age decides).
func TestJudgeForeignLooksUpTheRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb);
		CREATE TABLE empty_outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb);
		INSERT INTO outbox VALUES ('0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d', 'order', 'a', 'T', '{}')`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := now.Add(-time.Hour)
	for _, tc := range []struct {
		name, table, last string
		written           time.Time
		cleanup           bool
		want              cdc.ForeignVerdict
		why               string
	}{
		{"the row is here", "public.outbox", "0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d", old, false, cdc.ForeignMoved, `a row here (id "0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d" in public.outbox)`},
		{"another uuid", "public.outbox", "11111111-2222-3333-4444-555555555555", old, false, cdc.ForeignOther, "no row here"},
		{"no uuid at all", "public.outbox", "m1", old, false, cdc.ForeignOther, `no row here (no id "m1" in public.outbox, which holds rows)`},
		{"an empty table, an old record", "public.empty_outbox", "m1", old, false, cdc.ForeignUnsure, "the outbox table holds no rows"},
		{"an empty table, a fresh record", "public.empty_outbox", "m1", now, false, cdc.ForeignOther, "its relay is running"},
		{"cleanup", "public.outbox", "11111111-2222-3333-4444-555555555555", old, true, cdc.ForeignUnsure, "cdc.cleanup deletes the rows it published"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cdc.Config{URL: url, Table: tc.table, Slot: "s", Publication: "p"}
			cfg.Cleanup.Enabled = tc.cleanup
			src, err := cdc.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cp := connector.Checkpoint{Key: connector.CheckpointKey{SystemID: "7000000000000000001", Database: "app", Slot: "s"}, LastEventID: tc.last, Written: tc.written}
			f := src.JudgeForeign(ctx, conn, cp, now)
			if f.Verdict != tc.want || !strings.Contains(f.Why, tc.why) {
				t.Errorf("JudgeForeign = %q, %q; want %q, saying %q", f.Verdict, f.Why, tc.want, tc.why)
			}
		})
	}
}
