package integration

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// noAutoCreateKafka is a broker that creates no topic on first use
// (auto.create.topics.enable=false), as most production clusters run.
func noAutoCreateKafka(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(8))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// TestTopicCreationWithoutAutoCreate: against a broker that does not
// create topics, the relay creates each topic before its first record,
// with the settings of the first group its name matches (configs merged
// over the section's) or the section's own, and every event arrives.
func TestTopicCreationWithoutAutoCreate(t *testing.T) {
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	brokers := noAutoCreateKafka(t)
	name := uniqueName(t)
	ctx := context.Background()

	tc := sink.TopicCreation{Enabled: true,
		TopicSettings: sink.TopicSettings{Partitions: 3, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": "3600000"}},
		Groups: []sink.TopicGroup{{Name: "orders", Include: []string{`outbox\.event\.order`},
			TopicSettings: sink.TopicSettings{Partitions: 5, Configs: map[string]string{"cleanup.policy": "compact"}}}},
	}
	src := openCDC(t, cdc.Config{URL: url, Table: "public.outbox", Slot: name, Publication: name})
	r := startRelay(t, src, brokers, connector.RunnerConfig{}, sink.Config{TopicCreation: tc})
	waitSlotActive(ctx, t, pool, name)
	for _, agg := range []string{"order", "customer", "order"} {
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, 'a', 'T', '{}')`, agg); err != nil {
			t.Fatal(err)
		}
	}
	c := newCollector(t, brokers, "outbox.event.order", "outbox.event.customer")
	c.readAtLeast(ctx, t, 3, 60*time.Second)
	r.stop(t)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, "outbox.event.order", "outbox.event.customer")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int{"outbox.event.order": 5, "outbox.event.customer": 3} {
		if got := len(details[topic].Partitions); got != want {
			t.Errorf("topic %s has %d partitions, want %d", topic, got, want)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "outbox.event.order", "outbox.event.customer")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"outbox.event.order":    {"retention.ms": "3600000", "cleanup.policy": "compact"},
		"outbox.event.customer": {"retention.ms": "3600000", "cleanup.policy": "delete"},
	}
	for _, rc := range rcs {
		for _, cfg := range rc.Configs {
			w, ok := want[rc.Name][cfg.Key]
			if ok && (cfg.Value == nil || *cfg.Value != w) {
				t.Errorf("topic %s: %s is %v, want %s", rc.Name, cfg.Key, cfg.MaybeValue(), w)
			}
		}
	}
}
