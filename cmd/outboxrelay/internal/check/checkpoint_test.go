package check_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestCheckpointReported: check says what the checkpoint topic holds for
// the relay, named as the relay names itself: nothing yet; another
// cluster's checkpoint whose last event is a row here, on which the relay
// would stop (moved); and the relay's own, with its position and age.
func TestCheckpointReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testenv.Postgres(t)
	s := newSetup(ctx, t, dbURL)
	const last = "0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d"
	s.exec(ctx, t, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('`+last+`', 'order', 'o-1', 'Created', '{}')`)
	cfg, _ := s.config(t)
	r, _ := run(ctx, t, cfg)
	expect(t, r, check.CheckCheckpoint, check.Pass, "no checkpoint in outboxrelay.checkpoints for database", `slot "outboxrelay"`, "first start")

	id, err := cdc.Identify(ctx, dbURL, pgsql.Network{})
	if err != nil {
		t.Fatal(err)
	}
	self := id.CheckpointKey("outboxrelay")
	old := self
	old.SystemID = "7000000000000000001"
	save := func(key connector.CheckpointKey, cp connector.Checkpoint) {
		t.Helper()
		st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: s.brokers}, "", key)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Save(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	save(old, connector.Checkpoint{EndLSN: 0x1_00000000, LastEventID: last, Written: time.Now().Add(-time.Hour)})
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckCheckpoint, check.Fail, "it holds another cluster's for the same names", "cluster 7000000000000000001's (at 1/0, written 1h0m0s ago)",
		"moved from that cluster, since its last event is a row here", "outboxrelay backfill")

	save(self, connector.Checkpoint{EndLSN: 0x1925890, Events: 5})
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckCheckpoint, check.Pass, "its own checkpoint", "at 0/1925890", "5 events",
		"the topic also holds the checkpoints of other clusters with the same database and slot names: 7000000000000000001 (written 1h0m0s ago)")
}
