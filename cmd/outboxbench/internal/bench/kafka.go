package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

const topicPrefix = "outbox.event."

// topics are the topics the relay writes with the default routing.
func topics() []string {
	ts := make([]string, len(aggTypes))
	for i, t := range aggTypes {
		ts[i] = topicPrefix + t
	}
	return ts
}

// newCluster starts a one-broker kfake cluster with the topics made.
// A blackholed cluster acknowledges produced records and advances offsets
// without keeping the bytes: the drains and the raw ingest ceiling use one,
// so that neither the broker's copying of hundreds of megabytes nor its
// memory is in the figures, and the end offsets still count what was
// acknowledged. The latency phase needs to read records back, and keeps
// them.
func newCluster(partitions int, blackhole bool, produceDelay time.Duration) (*kfake.Cluster, error) {
	// kfake asks every client to push all its metrics (KIP-714) every 30s,
	// which a stock Kafka broker does only with a client-metrics plugin
	// installed: the pushes cost the relay a 4 MiB lz4 block and the
	// broker's CPU. Without the telemetry APIs the broker is like a stock
	// one: clients push nothing.
	versions := kversion.Tip()
	versions.SetMaxKeyVersion(71, -1) // GetTelemetrySubscriptions
	versions.SetMaxKeyVersion(72, -1) // PushTelemetry
	// The table finalizes transaction.version 2 but caps Produce below
	// v12, which no real broker does: franz-go then leaves out
	// AddPartitionsToTxn and the broker, without v12's implicit add,
	// refuses every transactional record (INVALID_TXN_STATE). Produce as
	// far as kfake goes, as a Kafka 4 broker does.
	versions.SetMaxKeyVersion(int16(kmsg.Produce), math.MaxInt16)
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(partitions),
		kfake.AllowAutoTopicCreation(),
		kfake.SeedTopics(int32(partitions), topics()...),
		kfake.MaxVersions(versions),
	}
	if blackhole {
		opts = append(opts, kfake.BlackholeProduce())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start the kfake broker: %w", err)
	}
	if produceDelay > 0 {
		// Each request sleeps on its own, while the broker goes on with
		// the others.
		c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.SleepControl(func() { time.Sleep(produceDelay) })
			return nil, nil, false
		})
	}
	return c, nil
}

// recordCounter counts what a broker has acknowledged on the topics.
type recordCounter struct {
	cl  *kgo.Client
	adm *kadm.Client
}

func newRecordCounter(brokers []string) (*recordCounter, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	return &recordCounter{cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (c *recordCounter) close() { c.cl.Close() }

// count is the sum of the topics' partitions' last stable offsets: every
// record the broker has appended, which it acknowledges right after, or,
// written in transactions (kafka.delivery exactly_once), once committed.
// A commit's markers take an offset each too: a transactional drain is
// counted done that many records early (one per partition per commit,
// about 0.2% of a 300,000-event drain at 100ms commits).
func (c *recordCounter) count(ctx context.Context) (int64, error) {
	offs, err := c.adm.ListCommittedOffsets(ctx, topics()...)
	if err != nil {
		return 0, fmt.Errorf("list end offsets: %w", err)
	}
	var n int64
	var errs []error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			errs = append(errs, o.Err)
		}
		n += o.Offset
	})
	return n, errors.Join(errs...)
}
