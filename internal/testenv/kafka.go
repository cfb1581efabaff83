package testenv

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka starts an in-process Kafka cluster for this test, closed by
// t.Cleanup, and returns it with its seed brokers. Defaults: one broker,
// eight partitions per topic, topics created when first produced to; opts
// come after the defaults and so override them.
func Kafka(t testing.TB, opts ...kfake.Opt) (cluster *kfake.Cluster, brokers []string) {
	t.Helper()
	all := append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(8),
		kfake.AllowAutoTopicCreation(),
	}, opts...)
	cluster, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("testenv: start kfake cluster: %v", err)
	}
	trackCluster(cluster)
	t.Cleanup(func() { closeCluster(cluster) })
	return cluster, cluster.ListenAddrs()
}

// Consume reads topics from their start, as a read_committed consumer, until
// n records arrived, and returns exactly n in the order they arrived. If ctx
// ends first the test fails, saying how many arrived.
func Consume(ctx context.Context, t testing.TB, brokers []string, topics []string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		t.Fatalf("testenv: consumer: %v", err)
	}
	defer cl.Close()

	records := make([]*kgo.Record, 0, n)
	var lastErr error
	for len(records) < n && ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, n-len(records))
		fetches.EachError(func(_ string, _ int32, err error) {
			if ctx.Err() == nil {
				lastErr = err
			}
		})
		records = append(records, fetches.Records()...)
	}
	if len(records) < n {
		t.Fatalf("testenv: consumed %d of %d records from %v before %v (last fetch error: %v)",
			len(records), n, topics, context.Cause(ctx), lastErr)
	}
	return records
}
