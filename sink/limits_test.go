package sink

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// Topics are input, so the cache of their limits is bounded; past the
// bound a topic in use is still found there, not looked up again for
// every record (issue 24).
func TestLimitsCacheIsBoundedAndKeepsTopicsInUse(t *testing.T) {
	cluster, brokers := testenv.Kafka(t)
	var described atomic.Int32
	cluster.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		described.Add(1)
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bound = 5
	l := &limits{max: bound}
	for i := range 3 * bound {
		if _, err := l.get(ctx, cl, fmt.Sprintf("topic-%d", i)); err != nil {
			t.Fatal(err)
		}
		if n := len(l.topics); n > bound {
			t.Fatalf("%d topics cached, bound %d", n, bound)
		}
	}
	before := described.Load()
	for range 10 {
		if _, err := l.get(ctx, cl, "in-use"); err != nil {
			t.Fatal(err)
		}
	}
	if n := described.Load() - before; n != 1 {
		t.Errorf("a topic used 10 times past the bound was looked up %d times, want once", n)
	}
}
