package integration

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// A slot lost under a streaming relay, with events on their way to
// Kafka: the server invalidates the slot (max_slot_wal_keep_size) while
// the broker holds every produce request, ending the walsender. The relay
// waits for Kafka to acknowledge what it had handed on before it stops on
// the loss, so the checkpoint it stops with holds every event in Kafka,
// and a backfill after it publishes none of them again. Before, the
// runner dropped the records not yet sent, the ones already sent landed
// without the acknowledgement a checkpoint needs, and a backfill
// published those again.
func TestCDCSlotLostWaitsForInFlight(t *testing.T) {
	ctx := context.Background()
	srv := testenv.PostgresServer(t)
	url, err := srv.CreateDatabase(ctx, "lostinflight")
	if err != nil {
		t.Fatal(err)
	}
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	cluster, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	const slot = "lost_in_flight"
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src, err := cdc.New(cdc.Config{URL: url, Table: "public.outbox", Slot: slot, Publication: slot, StatusInterval: 100 * time.Millisecond},
		cdc.WithLogger(log),
		cdc.WithCheckpoints(func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
			return sink.NewCheckpointStore(ctx, sink.Config{Brokers: brokers}, "", key)
		}, "test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	r := startRelayLogging(t, src, brokers, connector.RunnerConfig{}, sink.Config{}, log)
	waitSlotActive(ctx, t, pool, slot)
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 2, aggregates: 20, events: 200, txnSize: 5}
	w.write(ctx, t, pool)
	c.waitFor(t, readRows(ctx, t, pool, "outbox"), time.Minute)

	// The broker holds every produce request of the events from now on;
	// the checkpoints' go through. A request names a topic by its id.
	eventTopic := topicID(ctx, t, brokers, "outbox.event.order")
	var produces atomic.Int64
	var holding atomic.Bool
	release := make(chan struct{})
	holding.Store(true)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		events := false
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			events = events || tp.Topic == "outbox.event.order" || tp.TopicID == eventTopic
		}
		if events {
			produces.Add(1)
		}
		if events && holding.Load() {
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	w.seqBase, w.events = 200/20, 2000
	w.write(ctx, t, pool)
	written := len(readRows(ctx, t, pool, "outbox"))
	deadline := time.Now().Add(30 * time.Second)
	for countRows(t, pool, `SELECT count(*) FROM pg_stat_replication WHERE sent_lsn < pg_current_wal_lsn()`) != 0 || produces.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the walsender did not send the events, or the relay produced none (%d requests)", produces.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}

	invalidateSlot(ctx, t, pool, slot)
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "the replication slot was lost under the stream") && !strings.Contains(logs.String(), "dropping the events not yet sent") {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not notice its stream ended:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	holding.Store(false)
	close(release)
	err = r.wait(t, time.Minute)
	var lost *cdc.SlotLostError
	if !errors.As(err, &lost) || lost.Cause != cdc.CauseInvalidated {
		t.Fatalf("relay stopped with %v; want the invalidated slot", err)
	}
	c.settle(time.Second)
	inKafka := map[string]bool{}
	for _, rec := range c.recs {
		inKafka[header(rec, "id")] = true
	}
	cp, _ := src.Checkpoint()
	// What the relay had not read from its socket when the stream ended
	// is the gap a backfill publishes; what it had handed on is in Kafka.
	t.Logf("%d events written, %d in Kafka, the checkpoint counts %d", written, len(inKafka), cp.Events)
	if cp.Events != int64(len(inKafka)) {
		t.Errorf("the checkpoint the relay stopped with counts %d events, Kafka has %d: a backfill after it publishes %d again",
			cp.Events, len(inKafka), int64(len(inKafka))-cp.Events)
	}
	if t.Failed() {
		t.Logf("relay log:\n%s", logs.String())
	}
}

// invalidateSlot makes the server invalidate the slot, which its relay
// does not confirm past: WAL past a 1MB max_slot_wal_keep_size, then a
// checkpoint, until wal_status says lost.
func invalidateSlot(ctx context.Context, t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	for _, sql := range []string{
		`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`,
		`SELECT pg_reload_conf()`,
		`CREATE TABLE IF NOT EXISTS filler (b text)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; {
		var status string
		if err := pool.QueryRow(ctx, `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == "lost" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot's wal_status is %q after a minute of WAL past max_slot_wal_keep_size", status)
		}
		for _, sql := range []string{
			`INSERT INTO filler SELECT repeat(md5(g::text), 100) FROM generate_series(1, 5000) g`,
			`SELECT pg_switch_wal()`,
			`CHECKPOINT`,
		} {
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
}

// topicID is the id the broker gave topic.
func topicID(ctx context.Context, t *testing.T, brokers []string, topic string) [16]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil || details[topic].Err != nil {
		t.Fatalf("look up topic %s: %v %v", topic, err, details[topic].Err)
	}
	return details[topic].ID
}
