package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// limits knows the largest record each topic accepts: its max.message.bytes,
// or the broker's message.max.bytes for topics without an override (an
// auto-created topic gets the broker's). The broker's is read before the
// first record. A topic's own is looked up in the background, many topics
// to a request (lookups), while its first records go out under the
// broker's: a lookup on the publishing goroutine would hold every new
// topic's first record up for a round trip, and many new topics for as
// many round trips one after the other. franz-go asks for a topic's batch
// size limit (batch) once, when it first learns of the topic's
// partitions; a topic whose override is smaller than the broker's and was
// not yet known then may have a batch refused, which the runner sends
// again one record at a time.
type limits struct {
	fixed int // kafka.max_record_bytes; 0 to ask the brokers
	max   int // topics cached; 0 for maxTopicLimits
	// sync: look a new topic up before its first record, on the caller's
	// goroutine, as with transactions, whose client is never replaced
	// (Sink.renew), so a batch size franz-go took too early would stay.
	sync bool

	mu     sync.RWMutex
	broker int
	topics map[string]int
	// pending are the topics to look up; the lookups goroutine takes
	// them all at once. Bounded by max: past it a topic stays at the
	// broker's limit until it is published to again.
	pending map[string]struct{}
	wake    chan struct{}
	// started: the lookups goroutine runs; stop ends it (close).
	started bool
	stop    chan struct{}
	// cl is the client of the last get: the sink replaces its client
	// now and then (Sink.renew).
	cl *kgo.Client
	// smaller counts the topics found to take less than the broker: the
	// client may have learned their partitions, and with them a batch
	// size (batch), before their lookup, so the sink replaces it.
	smaller int

	// log, when set, hears of background lookups that failed, at most
	// once per lookupWarnEvery (warnedAt): their topics stay at the
	// broker's limit meanwhile, which nothing else would say.
	log      *slog.Logger
	warnedAt time.Time
}

// lookupWarnEvery bounds how often a failing background lookup is logged.
const lookupWarnEvery = time.Minute

// maxTopicLimits bounds the per-topic cache (about 1 MB): topics are
// input, an aggregate type names one. Past it, a topic looked up evicts
// another, so that a topic in use keeps being found here however many
// others came before it, rather than being looked up again, a round trip,
// for every record once the cache is full.
const maxTopicLimits = 10000

// maxLookup is how many topics one DescribeConfigs request asks about.
const maxLookup = 1000

// kafkaDefaultLimit is Kafka's own default message.max.bytes.
const kafkaDefaultLimit = 1048588

// get returns the limit for topic: the broker's until the topic's own is
// known, which it asks for in the background. Only the broker's limit,
// once, is read here, on the publishing goroutine (and, with sync, each
// new topic's).
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
	if broker == 0 {
		b, err := brokerLimit(ctx, kadm.NewClient(cl))
		if err != nil {
			return 0, err
		}
		broker = b
	}
	if l.sync {
		found, err := topicLimits(ctx, kadm.NewClient(cl), []string{topic}, broker)
		if err != nil {
			return 0, refusedLookup(err, topic)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.broker = broker
		l.store(found)
		return cmp.Or(found[topic], broker), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broker = broker
	l.cl = cl
	if v, ok := l.topics[topic]; ok {
		return v, nil
	}
	if l.pending == nil {
		l.pending = map[string]struct{}{}
		l.wake = make(chan struct{}, 1)
	}
	if _, ok := l.pending[topic]; !ok && len(l.pending) < cmp.Or(l.max, maxTopicLimits) {
		l.pending[topic] = struct{}{}
		if !l.started {
			l.started = true
			if l.stop == nil {
				l.stop = make(chan struct{})
			}
			go l.lookups()
		}
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return broker, nil
}

// close ends the lookups goroutine.
func (l *limits) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop == nil {
		l.stop = make(chan struct{})
	}
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
}

// lookups asks the brokers for the pending topics' limits, up to
// maxLookup in a request, until close.
func (l *limits) lookups() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-l.stop
		cancel()
	}()
	for {
		select {
		case <-l.stop:
			return
		case <-l.wake:
		}
		for {
			l.mu.Lock()
			topics := make([]string, 0, min(len(l.pending), maxLookup))
			for t := range l.pending {
				if len(topics) == maxLookup {
					break
				}
				topics = append(topics, t)
			}
			broker, cl := l.broker, l.cl
			l.mu.Unlock()
			if len(topics) == 0 {
				break
			}
			found, err := topicLimits(ctx, kadm.NewClient(cl), topics, broker)
			l.mu.Lock()
			for _, t := range topics {
				delete(l.pending, t)
			}
			l.store(found)
			l.mu.Unlock()
			if err != nil {
				// The topics not answered stay at the broker's limit
				// and are asked for again when next published to; a
				// pause keeps a broker in trouble from being asked in a
				// loop.
				l.warnLookup(len(topics)-len(found), err)
				select {
				case <-l.stop:
					return
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// warnLookup says, at most once per lookupWarnEvery, that n topics'
// limits could not be read, and so stay at the broker's.
func (l *limits) warnLookup(n int, err error) {
	if l.log == nil || time.Since(l.warnedAt) < lookupWarnEvery {
		return
	}
	l.warnedAt = time.Now()
	l.log.Warn("cannot read the record size limit of topics: their records are checked against the broker's limit until it can be read, and a batch the broker refuses as too large is published again one record at a time",
		"topics", n, "err", err)
}

// store caches found; l.mu is held.
func (l *limits) store(found map[string]int) {
	if l.topics == nil {
		l.topics = map[string]int{}
	}
	for t, v := range found {
		if _, ok := l.topics[t]; !ok && len(l.topics) >= cmp.Or(l.max, maxTopicLimits) {
			// Any one: map iteration starts at random. A topic evicted
			// is looked up again when next published to.
			for k := range l.topics {
				delete(l.topics, k)
				break
			}
		}
		if v < l.broker {
			l.smaller++
		}
		l.topics[t] = v
	}
}

// smallerFound is how many topics were found to take less than the
// broker.
func (l *limits) smallerFound() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.smaller
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

// ReadLimits reads the limits the relay checks records against when
// kafka.max_record_bytes is not set: the broker's message.max.bytes and,
// for each of topics, its own max.message.bytes (the broker's for a topic
// without an override, or not created yet). For `outboxrelay check`. A
// refused lookup is a [*LimitLookupError]; byTopic holds the topics it got
// an answer for.
func ReadLimits(ctx context.Context, adm *kadm.Client, topics []string) (broker int, byTopic map[string]int, err error) {
	broker, err = brokerLimit(ctx, adm)
	if err != nil || len(topics) == 0 {
		return broker, nil, err
	}
	byTopic, err = topicLimits(ctx, adm, topics, broker)
	return broker, byTopic, err
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
		return 0, refusedLookup(fmt.Errorf("describe broker %d config: %w", md.Brokers[0].NodeID, err))
	}
	n, err := configInt(rcs, "message.max.bytes", kafkaDefaultLimit)
	return n, refusedLookup(err)
}

// topicLimits returns the limits of those of topics it got an answer for:
// a topic's max.message.bytes override, or broker for a topic without one
// or not created yet (created on first produce, with the broker's limit).
func topicLimits(ctx context.Context, adm *kadm.Client, topics []string, broker int) (map[string]int, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	found := make(map[string]int, len(rcs))
	var errs []error
	if err != nil {
		what := fmt.Sprintf("%d topics", len(topics))
		if len(topics) == 1 {
			what = "topic " + topics[0]
		}
		errs = append(errs, refusedLookup(fmt.Errorf("describe the config of %s: %w", what, err), topics...))
	}
	for _, rc := range rcs {
		v, err := topicLimit(rc, broker)
		if err != nil {
			errs = append(errs, refusedLookup(err, rc.Name))
			continue
		}
		found[rc.Name] = v
	}
	return found, errors.Join(errs...)
}

func topicLimit(rc kadm.ResourceConfig, broker int) (int, error) {
	if errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
		return broker, nil
	}
	// Only a topic's own override counts: without one, the broker's
	// message.max.bytes applies, whatever default the topic reports.
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			return broker, nil
		}
	}
	return configInt(kadm.ResourceConfigs{rc}, "max.message.bytes", broker)
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
