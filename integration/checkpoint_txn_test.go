package integration

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// TestCheckpointReadWaitsForOpenTransaction: another relay that shares the
// checkpoint topic (kafka.delivery exactly_once, another database) has a
// Kafka transaction open on its one partition while this relay saves its
// checkpoints and stops. Reading only up to the last stable offset, the
// restart would get an older checkpoint, find the slot ahead of it, and
// stop for good as if the slot were lost. It waits for the transaction to
// end instead, then carries on.
func TestCheckpointReadWaitsForOpenTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	c := newCollector(t, e.brokers, "outbox.event.order")
	var logs syncBuffer
	src := e.checkpointed(t, cdc.SlotLossFail, &logs)
	r := startRelay(t, src, e.brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, e.pool, e.name)
	w := workload{table: e.table, writers: 1, aggregates: 5, events: 50}
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)

	other, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID("other-relay-"+e.name),
		kgo.DefaultProduceTopic(sink.DefaultCheckpointTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, &kgo.Record{Key: []byte("1/otherdb/otherslot"), Value: []byte(`{"version":1}`), Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	w.seqBase = 10
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)
	r.stop(t)
	waitSlotReleased(ctx, t, e.pool, e.name)

	r = startRelay(t, e.checkpointed(t, cdc.SlotLossFail, &logs), e.brokers, connector.RunnerConfig{}, sink.Config{})
	defer r.stop(t)
	select {
	case err := <-r.done:
		r.done = nil
		t.Fatalf("with a transaction open on the checkpoint topic, a graceful restart stopped the relay: %v", err)
	case <-time.After(2 * time.Second):
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitSlotActive(ctx, t, e.pool, e.name)
	w.seqBase = 20
	w.write(ctx, t, e.pool)
	c.waitFor(t, readRows(ctx, t, e.pool, e.table), time.Minute)
}
