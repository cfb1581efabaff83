package sink

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// describeCounter counts the DescribeConfigs requests cluster answers.
func describeCounter(cluster *kfake.Cluster) *atomic.Int32 {
	var n atomic.Int32
	cluster.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// settle waits until l has no lookup pending.
func (l *limits) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.RLock()
		n := len(l.pending)
		l.mu.RUnlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d topic limit lookups still pending after 30s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newTestClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Topics are input, so the cache of their limits is bounded; past the
// bound a topic in use is still found there, not looked up again for
// every record.
func TestLimitsCacheIsBoundedAndKeepsTopicsInUse(t *testing.T) {
	cluster, brokers := testenv.Kafka(t)
	described := describeCounter(cluster)
	cl := newTestClient(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bound = 5
	l := &limits{max: bound}
	defer l.close()
	for i := range 3 * bound {
		if _, err := l.get(ctx, cl, fmt.Sprintf("topic-%d", i)); err != nil {
			t.Fatal(err)
		}
		l.settle(t)
		l.mu.RLock()
		n := len(l.topics)
		l.mu.RUnlock()
		if n > bound {
			t.Fatalf("%d topics cached, bound %d", n, bound)
		}
	}
	before := described.Load()
	for range 10 {
		if _, err := l.get(ctx, cl, "in-use"); err != nil {
			t.Fatal(err)
		}
		l.settle(t)
	}
	if n := described.Load() - before; n != 1 {
		t.Errorf("a topic used 10 times past the bound was looked up %d times, want once", n)
	}
}

// A new topic's limit is the broker's at once, with no request on the
// caller's goroutine; its own max.message.bytes is looked up in the
// background, many topics to a request, and used from then on: a request
// per new topic on the caller's goroutine would hold each new topic's
// first record up for a round trip.
func TestLimitsLooksTopicsUpInTheBackgroundInBatches(t *testing.T) {
	const broker, small = 100000, 5000
	cluster, brokers := testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(broker)}))
	cl := newTestClient(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr(fmt.Sprint(small))}, "overridden"); err != nil {
		t.Fatal(err)
	}
	// Held until released: no lookup can finish meanwhile.
	release := make(chan struct{})
	var described atomic.Int32
	cluster.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if rs := req.(*kmsg.DescribeConfigsRequest).Resources; len(rs) > 0 && rs[0].ResourceType == kmsg.ConfigResourceTypeTopic {
			described.Add(1)
			<-release
		}
		return nil, nil, false
	})
	l := &limits{}
	defer l.close()
	const topics = 200
	for i := range topics {
		name := fmt.Sprintf("new-%d", i)
		if i == topics/2 {
			name = "overridden"
		}
		v, err := l.get(ctx, cl, name)
		if err != nil {
			t.Fatal(err)
		}
		if v != broker {
			t.Fatalf("the limit of %s before its lookup = %d, want the broker's %d", name, v, broker)
		}
	}
	close(release)
	l.settle(t)
	if n := described.Load(); n < 1 || n > 3 {
		t.Errorf("%d topics were looked up in %d requests, want 1 to 3 (one in flight, the rest together)", topics, n)
	}
	for _, tc := range []struct {
		topic string
		want  int
	}{
		{"overridden", small},
		{"new-1", broker},
		{"new-199", broker},
	} {
		if v, err := l.get(ctx, cl, tc.topic); err != nil || v != tc.want {
			t.Errorf("limit of %s after its lookup = %d, %v; want %d", tc.topic, v, err, tc.want)
		}
		if b := l.batch(tc.topic); int(b) != tc.want+1 {
			t.Errorf("batch cap of %s = %d, want %d", tc.topic, b, tc.want+1)
		}
	}
}
