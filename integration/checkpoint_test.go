package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/sink"
)

// checkpointed is a CDC source that keeps its checkpoints in the env's
// Kafka, as the app does, and logs to logs as well as to the test.
func (e *env) checkpointed(t *testing.T, onSlotLoss cdc.OnSlotLoss, logs *syncBuffer) *cdc.Source {
	t.Helper()
	brokers := e.brokers
	open := func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
		return sink.NewCheckpointStore(ctx, sink.Config{Brokers: brokers}, "", key)
	}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name,
		StatusInterval: 100 * time.Millisecond, OnSlotLoss: onSlotLoss},
		cdc.WithLogger(log), cdc.WithCheckpoints(open, "test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
}

// checkpointKey is the key the env's relay saves its checkpoints under.
func (e *env) checkpointKey(t *testing.T) connector.CheckpointKey {
	t.Helper()
	id, err := cdc.Identify(context.Background(), e.url, pgsql.Network{})
	if err != nil {
		t.Fatal(err)
	}
	return id.CheckpointKey(e.name)
}

// relayAndStop relays a first round of events with a checkpointed source,
// stops it gracefully and returns the checkpoint it left.
func (e *env) relayAndStop(ctx context.Context, t *testing.T, c *collector, w workload) connector.Checkpoint {
	t.Helper()
	var logs syncBuffer
	src := e.checkpointed(t, cdc.SlotLossFail, &logs)
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, e.pool, e.name)
	w.write(ctx, t, e.pool)
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, time.Minute)
	r.stop(t)
	cp, ok := src.Checkpoint()
	if !ok {
		t.Fatal("the relay stopped without a checkpoint")
	}
	if cp.Events != int64(len(rows)) || cp.CommitTime.IsZero() || cp.RelayVersion != "test" {
		t.Fatalf("checkpoint after %d events: %+v", len(rows), cp)
	}
	if _, ok := rows[cp.LastEventID]; !ok {
		t.Fatalf("the checkpoint's last event id %q is no outbox row", cp.LastEventID)
	}
	var confirmed string
	if err := e.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.name).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if confirmed != connector.FormatLSN(cp.EndLSN) {
		t.Fatalf("after a graceful stop the slot is at %s, the checkpoint at %s", confirmed, connector.FormatLSN(cp.EndLSN))
	}
	return cp
}

func slotExists(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string) bool {
	t.Helper()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// wantSlotLost checks the error a relay stopped with on a lost slot.
func wantSlotLost(t *testing.T, err error, cause cdc.SlotLossCause, want ...string) {
	t.Helper()
	var lost *cdc.SlotLostError
	if !connector.IsPermanent(err) || !errors.As(err, &lost) {
		t.Fatalf("relay stopped with %v; want a permanent SlotLostError", err)
	}
	if lost.Cause != cause {
		t.Errorf("cause %q, want %q", lost.Cause, cause)
	}
	for _, w := range append(want, "may never reach Kafka", "cdc.on_slot_loss: recreate") {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
	wantBackfillAdvice(t, "the error", err.Error())
}

// printedWithoutColumn is the backfill command a slot-loss error prints
// for the outbox table of these tests, which has no insert-time column,
// on a server that keeps no commit times: after the checkpoint, when the
// transaction snapshot it carries serves on this server, else every row
// (TestBackfillRunsTheCommandTheErrorPrints runs both).
var printedWithoutColumn = regexp.MustCompile("`outboxrelay backfill (--after-checkpoint|--all)`")

func wantBackfillAdvice(t *testing.T, where, text string) {
	t.Helper()
	if !printedWithoutColumn.MatchString(text) {
		t.Errorf("%s names neither `outboxrelay backfill --after-checkpoint` nor `outboxrelay backfill --all`:\n%s", where, text)
	}
}

// wantExitSlotLost checks how a relay process ended on a lost slot: exit
// 1, its last ERROR record the loss with the recovery.
func wantExitSlotLost(t *testing.T, err error, want ...string) {
	t.Helper()
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("relay ended with %v; want exit 1 on the lost slot", err)
	}
	for _, w := range append(want, "may never reach Kafka", "cdc.on_slot_loss: recreate") {
		if !strings.Contains(exit.msg, w) {
			t.Errorf("the last ERROR does not say %q:\n%s", w, exit.msg)
		}
	}
	wantBackfillAdvice(t, "the last ERROR", exit.msg)
}

// onlyRows asserts that every record is one of rows, and none of gap.
func onlyRows(t *testing.T, c *collector, rows map[string]row, gap map[string]row) {
	t.Helper()
	c.settle(300 * time.Millisecond)
	for _, rec := range c.recs {
		id := header(rec, "id")
		if _, ok := gap[id]; ok {
			t.Errorf("event %s, committed while the slot was lost, reached Kafka: the test's premise is wrong", id)
		} else if _, ok := rows[id]; !ok {
			t.Errorf("record with id %q is no outbox row", id)
		}
	}
}

// The slot is dropped while no relay runs, and events are committed: only
// the checkpoint in Kafka can tell this restart from a first start. By
// default the relay stops with an error naming the slot, the checkpoint's
// position and commit time, and what to do, and creates no slot; with
// recreate it reports the gap at ERROR and goes on from a new slot.
func TestCDCCheckpointSlotDroppedWhileStopped(t *testing.T) {
	for _, mode := range []cdc.OnSlotLoss{cdc.SlotLossFail, cdc.SlotLossRecreate} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, cdcKind)
			c := newCollector(t, e.brokers, "outbox.event.order")
			w := workload{table: e.table, writers: 2, aggregates: 10, events: 200}
			cp := e.relayAndStop(ctx, t, c, w)
			before := readRows(ctx, t, e.pool, e.table)

			dropStoppedSlot(ctx, t, e.pool, e.name)
			w.seqBase = 200 / 10
			w.write(ctx, t, e.pool)
			gap := map[string]row{}
			for id, rw := range readRows(ctx, t, e.pool, e.table) {
				if _, ok := before[id]; !ok {
					gap[id] = rw
				}
			}

			var logs syncBuffer
			src := e.checkpointed(t, mode, &logs)
			r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
			if mode == cdc.SlotLossFail {
				wantSlotLost(t, r.wait(t, time.Minute), cdc.CauseDropped,
					`replication slot "`+e.name+`" is gone`, "dropped", "failover",
					connector.FormatLSN(cp.EndLSN), cp.CommitTime.UTC().Format(time.RFC3339Nano),
					// The same server process: the checkpoint's transaction
					// snapshot chooses the gap's rows without a column.
					"`outboxrelay backfill --after-checkpoint`")
				if slotExists(ctx, t, e.pool, e.name) {
					t.Error("the relay created a new slot past the gap; with on_slot_loss fail it must not")
				}
				if !src.SlotLost() {
					t.Error("SlotLost() is false after the relay stopped on a lost slot")
				}
				onlyRows(t, c, before, gap)
			} else {
				waitSlotActive(ctx, t, e.pool, e.name)
				w.seqBase = 2 * 200 / 10
				w.write(ctx, t, e.pool)
				after := map[string]row{}
				for id, rw := range readRows(ctx, t, e.pool, e.table) {
					if _, old := before[id]; !old {
						if _, lost := gap[id]; !lost {
							after[id] = rw
						}
					}
				}
				c.waitFor(t, after, time.Minute)
				r.stop(t)
				for _, w := range []string{"level=ERROR", "is gone", cp.CommitTime.UTC().Format(time.RFC3339Nano), "`outboxrelay backfill --all`", connector.FormatLSN(cp.EndLSN)} {
					if !strings.Contains(logs.String(), w) {
						t.Errorf("the log does not say %q:\n%s", w, logs.String())
					}
				}
				// The new slot's checkpoint replaced the old one.
				now, ok := src.Checkpoint()
				if !ok || now.Events != cp.Events+int64(len(after)) {
					t.Errorf("checkpoint after the recreate %+v; want %d events counted", now, cp.Events+int64(len(after)))
				}
				for id, rw := range before {
					after[id] = rw
				}
				onlyRows(t, c, after, gap)
			}
			if n := src.SlotLosses(); n != 1 {
				t.Errorf("SlotLosses = %d, want 1", n)
			}
		})
	}
}

// Someone drops the slot and creates it again while the relay is stopped,
// after more events were committed: the new slot stands past the
// checkpoint, which the relay's own slot never does, and starting from it
// would skip those events. The relay stops and says so.
func TestCDCCheckpointSlotRecreatedAhead(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	c := newCollector(t, e.brokers, "outbox.event.order")
	w := workload{table: e.table, writers: 1, aggregates: 5, events: 50}
	cp := e.relayAndStop(ctx, t, c, w)
	before := readRows(ctx, t, e.pool, e.table)

	dropStoppedSlot(ctx, t, e.pool, e.name)
	w.seqBase = 50 / 5
	w.write(ctx, t, e.pool)
	gap := readRows(ctx, t, e.pool, e.table)
	for id := range before {
		delete(gap, id)
	}
	var created string
	if err := e.pool.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, e.name).Scan(&created); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	r := startRelay(t, e.checkpointed(t, cdc.SlotLossFail, &logs), e.brokers, connector.RunnerConfig{}, sink.Config{})
	wantSlotLost(t, r.wait(t, time.Minute), cdc.CauseAhead,
		`replication slot "`+e.name+`" is at `+created+", ahead of the checkpoint",
		"pg_replication_slot_advance", connector.FormatLSN(cp.EndLSN), "`outboxrelay backfill --after-checkpoint`")
	onlyRows(t, c, before, gap)
}

// A checkpoint for this database and slot written by another cluster
// stops a relay that has none of its own, before it creates a slot, when
// it is the relay's past: its last event is a row here (a database moved
// by a dump and restore, a pg_upgrade, a blue/green switch). When that
// cannot be told (the table is empty) and the record is old, it stops
// too, saying both explanations and the fix for each.
func TestCDCCheckpointFromAnotherCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		// row: the table holds the checkpoint's last event.
		row  bool
		want []string
	}{
		{"moved", true, []string{"is a row here", "This database was moved from there"}},
		{"cannot tell", false, []string{"the outbox table holds no rows", "written 2h0m", "Another relay with these names? Give this one its own cdc.slot or kafka.checkpoint_topic. This database moved from there?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := newEnv(t, cdcKind)
			self := e.checkpointKey(t)
			old := self
			old.SystemID = "7000000000000000001"
			st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", old)
			if err != nil {
				t.Fatal(err)
			}
			last := "0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d"
			if tc.row {
				if _, err := e.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', 'a', 'T', '{}')`, tableIdent(e.table)), last); err != nil {
					t.Fatal(err)
				}
			}
			committed := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
			cp := connector.Checkpoint{EndLSN: 0x1_00000000, CommitTime: committed, Events: 99, LastEventID: last, Written: time.Now().Add(-2 * time.Hour)}
			if err := st.Save(ctx, cp); err != nil {
				t.Fatal(err)
			}
			st.Close()

			var logs syncBuffer
			r := startRelay(t, e.checkpointed(t, cdc.SlotLossFail, &logs), e.brokers, connector.RunnerConfig{}, sink.Config{})
			err = r.wait(t, time.Minute)
			wantSlotLost(t, err, cdc.CauseForeign, append(tc.want,
				"is another cluster's", "system_identifier "+old.SystemID, "this one is "+self.SystemID,
				"after 1/0 (committed at "+committed.Format(time.RFC3339Nano)+")", "outboxrelay backfill")...)
			// About 600 with the default names; the test's are longer.
			if n := len(err.Error()); n > 700 {
				t.Errorf("the error is %d characters long:\n%v", n, err)
			}
			if n := strings.Count(logs.String(), "is another cluster's"); n != 1 {
				t.Errorf("the log says it %d times, want once:\n%s", n, logs.String())
			}
			if slotExists(ctx, t, e.pool, e.name) {
				t.Error("the relay created a slot despite another cluster's checkpoint")
			}
		})
	}
}

// A checkpoint record under the relay's own key that cannot be trusted
// (corrupt, or from a newer relay) stops it with an error that names the
// record and the problem: never a crash, never a start that ignores it.
func TestCDCCheckpointUnreadable(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"corrupt", `{"version":1,"end_lsn":`, "not JSON"},
		{"future version", `{"version":4,"position":{"lsn":"0/1"}}`, "version 4 was written by a newer relay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := newEnv(t, cdcKind)
			key := e.checkpointKey(t)
			// The store creates the topic, one partition; the bad record
			// then follows a good one there.
			st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", key)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Save(ctx, connector.Checkpoint{EndLSN: 1}); err != nil {
				t.Fatal(err)
			}
			st.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: sink.DefaultCheckpointTopic, Key: []byte(key.String()), Value: []byte(tc.value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}

			var logs syncBuffer
			r := startRelay(t, e.checkpointed(t, cdc.SlotLossFail, &logs), e.brokers, connector.RunnerConfig{}, sink.Config{})
			err = r.wait(t, time.Minute)
			if !connector.IsPermanent(err) || !errors.Is(err, connector.ErrCheckpointUnreadable) {
				t.Fatalf("relay stopped with %v; want a permanent ErrCheckpointUnreadable", err)
			}
			for _, w := range []string{tc.want, sink.DefaultCheckpointTopic, "offset 1", key.String(), `slot "` + e.name + `"`} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			if slotExists(ctx, t, e.pool, e.name) {
				t.Error("the relay created a slot despite an unreadable checkpoint")
			}
		})
	}
}

// A relay that crashed after saving a checkpoint and before confirming it
// finds its slot behind the checkpoint: the transactions up to the
// checkpoint are in Kafka already and are not published again.
func TestCDCCheckpointAheadOfSlotSkips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t, cdcKind)
	c := newCollector(t, e.brokers, "outbox.event.order")
	w := workload{table: e.table, writers: 1, aggregates: 5, events: 50}
	cp := e.relayAndStop(ctx, t, c, w)
	before := readRows(ctx, t, e.pool, e.table)

	// Events the crashed relay had published, by the checkpoint's word.
	w.seqBase = 50 / 5
	w.write(ctx, t, e.pool)
	covered := readRows(ctx, t, e.pool, e.table)
	for id := range before {
		delete(covered, id)
	}
	var at string
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	end, err := pglogrepl.ParseLSN(at)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", e.checkpointKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, connector.Checkpoint{EndLSN: uint64(end), CommitTime: time.Now(), Events: cp.Events + int64(len(covered))}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var logs syncBuffer
	src := e.checkpointed(t, cdc.SlotLossFail, &logs)
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, e.pool, e.name)
	w.seqBase = 2 * 50 / 5
	w.write(ctx, t, e.pool)
	after := readRows(ctx, t, e.pool, e.table)
	for id := range before {
		delete(after, id)
	}
	for id := range covered {
		delete(after, id)
	}
	c.waitFor(t, after, time.Minute)
	r.stop(t)
	for id, rw := range before {
		after[id] = rw
	}
	onlyRows(t, c, after, covered)
	var confirmed string
	if err := e.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.name).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if lsn, _ := pglogrepl.ParseLSN(confirmed); lsn < end {
		t.Errorf("the slot is at %s, still behind the checkpoint at %s", confirmed, at)
	}
}

// Run as the binary runs, a relay stopped by a lost slot stays up: /readyz
// fails with the error, /healthz passes (a restart cannot help), and
// outboxrelay_replication_slot_lost is 1, until it is stopped.
func TestCDCSlotLostHoldsNotReady(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	env := map[string]string{
		"postgres.url":        e.url,
		"outbox.table":        "public." + e.table,
		"cdc.slot":            e.name,
		"cdc.publication":     e.name,
		"cdc.status_interval": "100ms",
		"kafka.brokers":       strings.Join(e.brokers, ","),
		"http.listen":         "127.0.0.1:0",
	}
	a := startApp(t, env)
	c := newCollector(t, e.brokers, "outbox.event.order")
	workload{table: e.table, writers: 1, aggregates: 5, events: 50}.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)
	a.stop(t)
	dropStoppedSlot(ctx, t, e.pool, e.name)

	a = launchApp(t, env)
	a.waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Minute, "relaying stopped", "is gone")
	a.waitMetric(t, "outboxrelay_replication_slot_lost", 30*time.Second, "1", func(v float64) bool { return v == 1 })
	if v, _ := value(a.scrape(t), "outboxrelay_replication_slot_losses_total", "cause", string(cdc.CauseDropped)); v != 1 {
		t.Errorf("outboxrelay_replication_slot_losses_total{cause=%q} = %v, want 1", cdc.CauseDropped, v)
	}
	if v, _ := value(a.scrape(t), "outboxrelay_replication_slot_lost", "cause", string(cdc.CauseDropped)); v != 1 {
		t.Errorf("outboxrelay_replication_slot_lost{cause=%q} = %v, want 1", cdc.CauseDropped, v)
	}
	if code, body := a.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s; a relay held on a lost slot is alive", code, body)
	}
	select {
	case err := <-a.done:
		t.Fatalf("the relay exited (%v); it should stay up, not ready", err)
	default:
	}
	a.cancel()
	err := <-a.done
	a.done = nil
	var exit *exitError
	if !errors.As(err, &exit) || !strings.Contains(exit.msg, "replication slot") {
		t.Fatalf("the stopped relay ended with %v; want exit 1 on the lost slot", err)
	}
}

// snapshotSource is a checkpointed CDC source with cdc.snapshot initial.
func (e *env) snapshotSource(t *testing.T, logs *syncBuffer) *cdc.Source {
	t.Helper()
	sc, topic := e.sinkConfig(), e.topics.checkpoint
	open := func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
		return sink.NewCheckpointStore(ctx, sc, topic, key)
	}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name,
		StatusInterval: 100 * time.Millisecond, Snapshot: cdc.SnapshotInitial},
		cdc.WithLogger(log), cdc.WithCheckpoints(open, "test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
}

// With cdc.snapshot initial, a first start on a table that already holds
// 10,000 rows, while writers keep inserting, publishes every row exactly
// once, in commit order per aggregate: the rows visible in the slot's
// exported snapshot first, then the stream from its consistent point.
func TestCDCSnapshotInitial(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	w := workload{table: e.table, writers: 4, aggregates: 100, events: 10000, txnSize: 5}
	w.write(ctx, t, e.pool)
	c := newCollector(t, e.brokers, "outbox.event.order")

	var logs syncBuffer
	src := e.snapshotSource(t, &logs)
	// The writers go on while the slot is created and the table is read.
	w.seqBase = 10000 / 100
	written := w.writeInBackground(ctx, t, e.pool)
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	<-written
	rows := readRows(ctx, t, e.pool, e.table)
	if len(rows) != 20000 {
		t.Fatalf("%d rows, want 20000", len(rows))
	}
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.settle(300 * time.Millisecond)
	if rep := c.check(t, rows, partitions); rep.duplicates != 0 {
		t.Errorf("%d records repeated; the snapshot and the stream must not overlap", rep.duplicates)
	}
	for _, want := range []string{"created replication slot with a snapshot", "snapshot published"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "already holds rows committed before") {
		t.Errorf("the relay warned about rows it published:\n%s", logs.String())
	}
	cp, ok := src.Checkpoint()
	if !ok || cp.SnapshotPending || cp.Events != 20000 {
		t.Errorf("checkpoint after the snapshot %+v; want it done, with 20000 events", cp)
	}
}

// refuseProducesAfter makes the broker acknowledge the first n produce
// requests for the event topic and refuse every later one, retriably, until
// the fault is removed.
func (e *env) refuseProducesAfter(n int64) *kfake.FaultHandle {
	var produced atomic.Int64
	return e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "outbox.event.order",
		Err: kerr.NotEnoughReplicas, Count: -1,
		When: func(kmsg.Request) bool { return produced.Add(1) > n }})
}

// stopRefused stops r once the broker has refused it (refuseProducesAfter),
// then lifts the refusal. What was refused cannot drain: the stop may say
// so.
func stopRefused(ctx context.Context, t *testing.T, r *relay, refuse *kfake.FaultHandle) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := refuse.Wait(waitCtx, 1); err != nil {
		t.Fatalf("the broker never refused a produce request: %v", err)
	}
	r.cancel()
	if err := r.wait(t, time.Minute); err != nil {
		t.Logf("relay stopped: %v", err)
	}
	refuse.Remove()
}

// A relay stopped before Kafka acknowledged the whole snapshot publishes
// the table again, as it is then, on its next start: some rows twice
// (their id headers mark them), none lost, each aggregate in order once
// repeats are dropped.
func TestCDCSnapshotInterrupted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	w := workload{table: e.table, writers: 4, aggregates: 100, events: 10000, txnSize: 5}
	w.write(ctx, t, e.pool)
	c := newCollector(t, e.brokers, "outbox.event.order")

	// The broker refuses the event topic after 20 produce requests, so
	// the stop comes with the snapshot certainly unfinished, however fast
	// the machine.
	refuse := e.refuseProducesAfter(20)
	var logs syncBuffer
	src, err := cdc.New(cdc.Config{URL: e.url, Table: "public." + e.table, Slot: e.name, Publication: e.name,
		StatusInterval: 100 * time.Millisecond, Snapshot: cdc.SnapshotInitial, MaxBatchEvents: 10},
		cdc.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), cdc.WithCheckpoints(func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
			return sink.NewCheckpointStore(ctx, sink.Config{Brokers: e.brokers}, "", key)
		}, "test"))
	if err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{ShutdownTimeout: 500 * time.Millisecond}, sink.Config{MaxBufferedRecords: 100})
	c.readAtLeast(ctx, t, 1, time.Minute)
	// What the broker refused cannot drain: the checkpoint covers only
	// what was acknowledged.
	stopRefused(ctx, t, r, refuse)
	src.Close()
	cp, ok := src.Checkpoint()
	if !ok || !cp.SnapshotPending {
		t.Fatalf("checkpoint after a stop mid-snapshot: %+v, want SnapshotPending", cp)
	}
	c.settle(300 * time.Millisecond)
	if len(c.recs) >= 10000 {
		t.Fatalf("the whole snapshot (%d records) was published before the stop; the test's premise is wrong", len(c.recs))
	}
	t.Logf("%d records published before the stop", len(c.recs))

	w.seqBase = 10000 / 100
	w.write(ctx, t, e.pool)
	var logs2 syncBuffer
	r = startRelay(t, e.snapshotSource(t, &logs2), e.brokers, connector.RunnerConfig{}, sink.Config{})
	rows := readRows(ctx, t, e.pool, e.table)
	c.waitFor(t, rows, 2*time.Minute)
	r.stop(t)
	c.settle(300 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d records for %d rows: %d repeated", rep.records, len(rows), rep.duplicates)
	if !strings.Contains(logs2.String(), "publishing the table again") {
		t.Errorf("the restart does not say it publishes the table again:\n%s", logs2.String())
	}
}

// TestCDCWarnsOfRowsBeforeTheSlot: a slot created over a table that holds
// rows says how many it will not relay, counted before it was created, so
// that rows writers commit after its consistent point, which it does
// relay, are never among them.
func TestCDCWarnsOfRowsBeforeTheSlot(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	before := workload{table: e.table, writers: 1, aggregates: 7, events: 7}
	before.write(ctx, t, e.pool)
	var logs syncBuffer
	src := e.checkpointed(t, cdc.SlotLossFail, &logs)
	// Writers go on while the slot is created.
	w := workload{table: e.table, writers: 2, aggregates: 10, events: 2000, txnSize: 2, seqBase: 1}
	written := w.writeInBackground(ctx, t, e.pool)
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	<-written
	// And some after it was created, surely relayed.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(logs.String(), "created replication slot"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no slot created after a minute:\n%s", logs.String())
		}
	}
	after := workload{table: e.table, writers: 1, aggregates: 10, events: 100, seqBase: 1000}
	after.write(ctx, t, e.pool)
	total := len(readRows(ctx, t, e.pool, e.table))
	// Everything the slot decodes reaches the topic; the count settles.
	relayed, deadline := -1, time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n := int(topicRecords(ctx, t, e.brokers, "outbox.event.order"))
		if n == relayed && n > 0 {
			break
		}
		relayed = n
		time.Sleep(time.Second)
	}
	r.stop(t)
	var warned []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "already holds rows committed before the replication slot existed") {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "rows=") {
		t.Fatalf("want one warning of the rows before the slot, got %d:\n%s", len(warned), logs.String())
	}
	var n int
	if _, err := fmt.Sscanf(warned[0][strings.Index(warned[0], "rows=")+len("rows="):], "%d", &n); err != nil {
		t.Fatalf("the warning's rows: %v: %s", err, warned[0])
	}
	// The 7 rows of before at least; never a row the slot relayed.
	t.Logf("%d rows, %d relayed, the warning counts %d", total, relayed, n)
	if relayed < 100 || n < 7 || n > total-relayed {
		t.Errorf("the warning counts %d rows; want at least the 7 written before the relay started and at most the %d of %d it did not relay (%d relayed)", n, total-relayed, total, relayed)
	}
}
