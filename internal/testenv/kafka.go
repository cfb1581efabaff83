package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka starts an in-process Kafka cluster for this test, closed by
// t.Cleanup, and returns it with its seed brokers. Defaults: one broker,
// eight partitions per topic, topics created when first produced to; opts
// come after the defaults and so override them.
//
// With a shared broker configured (OUTBOXRELAY_TEST_KAFKA_BROKERS, or
// OUTBOXRELAY_TEST_KAFKA=kafka|redpanda) the test is skipped: it gets a
// cluster it may configure (opts), inject faults into and name topics in
// as it likes, none of which a broker it did not start allows. A test that
// can share a broker calls KafkaBroker instead.
func Kafka(t testing.TB, opts ...kfake.Opt) (cluster *kfake.Cluster, brokers []string) {
	t.Helper()
	if s := kafkaSettings(t); s.shared() {
		t.Skipf("testenv: this test needs a kfake cluster of its own (kfake options, faults, or topic names other tests also use), and %s", s.describe())
	}
	cluster = startKfake(t, opts...)
	return cluster, cluster.ListenAddrs()
}

func startKfake(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
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
	return cluster
}

// Broker is a Kafka cluster that a test may share with other tests and
// with other runs: the shared broker when one is configured, else a kfake
// cluster of the test's own. A test using it names its topics after itself
// (TopicPrefix) and creates those whose partitions or settings matter
// (CreateTopics), since a shared broker's defaults are not the test's.
type Broker struct {
	// Addrs are the seed brokers, host:port.
	Addrs []string
	// Security is what a client must present to the broker; zero for
	// kfake and the containers.
	Security KafkaSecurity
	// Origin says where the broker came from, for the test log and skips.
	Origin string

	cluster *kfake.Cluster // nil on a shared broker
	opts    []kgo.Opt      // TLS and SASL, built from Security
}

// KafkaBroker returns the broker for a test that can share one: the
// shared broker (OUTBOXRELAY_TEST_KAFKA_BROKERS, or the container
// OUTBOXRELAY_TEST_KAFKA starts once per test binary), else a kfake
// cluster started as Kafka starts it, with kfakeOpts, closed by
// t.Cleanup. A shared broker takes none of kfakeOpts: a test passing them
// must hold on a broker without them, as one setting a limit on the
// broker for kfake and on its own topic (CreateTopics) for any broker.
func KafkaBroker(t testing.TB, kfakeOpts ...kfake.Opt) *Broker {
	t.Helper()
	s := kafkaSettings(t)
	if !s.shared() {
		c := startKfake(t, kfakeOpts...)
		return &Broker{Addrs: c.ListenAddrs(), Origin: "kfake in the test's process", cluster: c}
	}
	b, err := sharedBroker(s)
	if errors.Is(err, errNoDocker) {
		t.Skipf("testenv: %v", err)
	}
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return b
}

// Kfake returns b's kfake cluster, for a test that injects faults or
// reads kfake's own state. On a shared broker, it skips the test: what
// names what the test does that only kfake can, as "fails produce
// requests".
func (b *Broker) Kfake(t testing.TB, what string) *kfake.Cluster {
	t.Helper()
	if b.cluster == nil {
		t.Skipf("testenv: this test %s, which needs a kfake cluster of its own; the broker is %s", what, b.Origin)
	}
	return b.cluster
}

// Shared reports whether b is a broker the test did not start.
func (b *Broker) Shared() bool { return b.cluster == nil }

// ClientOpts are the options a franz-go client needs to reach b: the seed
// brokers, then TLS and SASL.
func (b *Broker) ClientOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, b.opts...)
}

// topicWait bounds how long CreateTopics waits for every partition of
// the topics it created to have a leader.
const topicWait = 30 * time.Second

// CreateTopics creates topics on b, each with partitions partitions, the
// broker's default replication factor and configs (topic-level settings
// such as max.message.bytes), and waits until every partition has a
// leader. A topic that exists already fails the test: topic names are the
// test's own.
func (b *Broker) CreateTopics(t testing.TB, partitions int, configs map[string]string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), topicWait)
	defer cancel()
	cl, err := kgo.NewClient(b.ClientOpts()...)
	if err != nil {
		t.Fatalf("testenv: admin client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cfg := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfg[k] = &v
	}
	resps, err := adm.CreateTopics(ctx, int32(partitions), -1, cfg, topics...)
	if err != nil {
		t.Fatalf("testenv: create topics %v on %s: %v", topics, b.Origin, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			t.Fatalf("testenv: create topic %s on %s: %v %s", r.Topic, b.Origin, r.Err, r.ErrMessage)
		}
	}
	for {
		details, err := adm.ListTopics(ctx, topics...)
		if err == nil && ledByAll(details, topics, partitions) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: the partitions of topics %v have no leader after %s (last error: %v)", topics, topicWait, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ledByAll reports whether every topic has its partitions, each with a
// leader.
func ledByAll(details kadm.TopicDetails, topics []string, partitions int) bool {
	for _, topic := range topics {
		d, ok := details[topic]
		if !ok || d.Err != nil || len(d.Partitions) != partitions {
			return false
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	return true
}

// topicSeq numbers TopicPrefix's prefixes within the test binary; runID
// tells apart the binaries and runs sharing a broker.
var topicSeq atomic.Int64

// TopicPrefix returns a prefix, ending in a dot, for the names of the
// topics of this test alone: it names the run and the test, as in
// "test.1a2b3c4d.7.testsources-cdc-killedmidstream.", so that a topic
// left on a shared broker says where it came from. Only dots and dashes
// separate its words: Kafka refuses a topic whose name equals another's
// once dots are read as underscores.
func TopicPrefix(t testing.TB) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 48 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if s := b.String(); s != "" && s[len(s)-1] != '-' {
			b.WriteByte('-')
		}
	}
	return fmt.Sprintf("test.%s.%d.%s.", runID, topicSeq.Add(1), strings.TrimRight(b.String(), "-"))
}

// KafkaClientOpts are the options a franz-go client needs to reach
// brokers: the seed brokers and, when they are the shared broker's, its
// TLS and SASL settings.
func KafkaClientOpts(brokers []string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if b := sharedIfStarted(); b != nil && slices.Equal(b.Addrs, brokers) {
		opts = append(opts, b.opts...)
	}
	return opts
}

// Consume reads topics from their start, as a read_committed consumer, until
// n records arrived, and returns exactly n in the order they arrived. If ctx
// ends first the test fails, saying how many arrived.
func Consume(ctx context.Context, t testing.TB, brokers []string, topics []string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(KafkaClientOpts(brokers),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)...)
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
