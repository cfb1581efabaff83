package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// limits knows the largest record each topic accepts: its max.message.bytes,
// or the broker's message.max.bytes for topics that do not exist yet (an
// auto-created topic gets the broker's). Publish looks a topic up before its
// first record, so by the time franz-go asks for the topic's batch size
// limit (when it first learns of the topic's partitions) the answer is
// known, and a batch of small records never exceeds what the broker takes.
type limits struct {
	fixed int // kafka.max_record_bytes; 0 to ask the brokers
	max   int // topics cached; 0 for maxTopicLimits

	mu     sync.RWMutex
	broker int
	topics map[string]int
}

// maxTopicLimits bounds the per-topic cache (about 1 MB): topics are
// input, an aggregate type names one. Past it, a topic looked up evicts
// another, so that a topic in use keeps being found here however many
// others came before it (it used to be looked up again for every record,
// a round trip each, once 10,000 other topics had been seen).
const maxTopicLimits = 10000

// kafkaDefaultLimit is Kafka's own default message.max.bytes.
const kafkaDefaultLimit = 1048588

// get returns the limit for topic, asking the brokers the first time. It is
// called from the one publishing goroutine and does its I/O without the
// lock, so batch never waits on a request.
func (l *limits) get(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	if l.fixed > 0 {
		return l.fixed, nil
	}
	l.mu.RLock()
	v, ok := l.topics[topic]
	broker := l.broker
	l.mu.RUnlock()
	if ok {
		return v, nil
	}
	adm := kadm.NewClient(cl)
	if broker == 0 {
		b, err := brokerLimit(ctx, adm)
		if err != nil {
			return 0, err
		}
		broker = b
	}
	v, err := topicLimit(ctx, adm, topic, broker)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.broker = broker
	if l.topics == nil {
		l.topics = map[string]int{}
	}
	if len(l.topics) >= cmp.Or(l.max, maxTopicLimits) {
		// Any one: map iteration starts at random. franz-go reads the
		// limit back (batch) when it learns the topic's partitions, soon
		// after this; a topic evicted before then gets the broker's, and
		// a batch of its that the broker then refuses is sent again one
		// record at a time by the runner.
		for k := range l.topics {
			delete(l.topics, k)
			break
		}
	}
	l.topics[topic] = v
	l.mu.Unlock()
	return v, nil
}

// batch is franz-go's per-topic batch size cap (ProducerBatchMaxBytesFn),
// clamped to the range franz-go accepts.
func (l *limits) batch(topic string) int32 {
	v := l.fixed
	if v == 0 {
		l.mu.RLock()
		v = l.topics[topic]
		if v == 0 {
			v = l.broker
		}
		l.mu.RUnlock()
	}
	if v == 0 {
		v = kafkaDefaultLimit
	}
	// franz-go counts a batch with one byte more than the broker does (the
	// length prefix of a flexible produce request; four on old brokers), so
	// one byte of slack lets a record of exactly the limit through, and its
	// batches still never exceed what the broker takes.
	return int32(min(max(v+1, 512), 1<<30))
}

func brokerLimit(ctx context.Context, adm *kadm.Client) (int, error) {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafka metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return 0, errors.New("kafka metadata lists no brokers")
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return 0, fmt.Errorf("describe broker %d config: %w", md.Brokers[0].NodeID, err)
	}
	return configInt(rcs, "message.max.bytes", kafkaDefaultLimit)
}

func topicLimit(ctx context.Context, adm *kadm.Client, topic string, broker int) (int, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe topic %s config: %w", topic, err)
	}
	for _, rc := range rcs {
		if errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
			return broker, nil // created on first produce, with the broker's limit
		}
	}
	// Only a topic's own override counts: without one, the broker's
	// message.max.bytes applies, whatever default the topic reports.
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				return broker, nil
			}
		}
	}
	return configInt(rcs, "max.message.bytes", broker)
}

func configInt(rcs kadm.ResourceConfigs, key string, def int) (int, error) {
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, fmt.Errorf("describe config of %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				n, err := strconv.Atoi(*c.Value)
				if err != nil || n <= 0 {
					return 0, fmt.Errorf("%s: %s %q is not a positive number", rc.Name, key, *c.Value)
				}
				return n, nil
			}
		}
	}
	return def, nil
}
