package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka client retries a produce the brokers refuse with
// NOT_ENOUGH_REPLICAS (fewer replicas in sync than the topic's
// min.insync.replicas, with acks=all) without bound and in order, as it
// should, and says nothing above debug: the relay's records simply wait,
// and the probes fail only once http.ready_stall_timeout passes. The stall
// watch notices records that wait with no batch written, asks the brokers
// which partitions of the topics the relay writes have fewer replicas in
// sync than they require, and says so, once per backoff step while it
// lasts.

// Bounds of the stall watch: records waiting this long with no batch
// written make it look (stallAfter), and it says so again after a step
// that doubles up to stallStepMax while they still wait.
var (
	stallAfter   = 5 * time.Second
	stallStepMax = 30 * time.Second
)

// stallWatch is the kgo hook that dates the last batch the brokers took,
// and the goroutine that watches for records waiting past it.
type stallWatch struct {
	// written is when the brokers last took a batch, in Unix nanoseconds.
	written atomic.Int64
	// stop ends the goroutine, done says it ended; nil until it starts.
	stop, done chan struct{}
}

var _ kgo.HookProduceBatchWritten = (*stallWatch)(nil)

// OnProduceBatchWritten implements [kgo.HookProduceBatchWritten].
func (w *stallWatch) OnProduceBatchWritten(kgo.BrokerMetadata, string, int32, kgo.ProduceBatchMetrics) {
	w.written.Store(time.Now().UnixNano())
}

// startWatch starts the stall watch, once; Publish calls it, on the
// publishing goroutine.
func (s *Sink) startWatch() {
	w := s.stalls
	if w.stop != nil {
		return
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go s.watchStalls(w.stop, w.done)
}

// stopWatch ends the stall watch and waits for it; once stopped, it does
// not start again.
func (s *Sink) stopWatch() {
	w := s.stalls
	if w.stop == nil {
		w.stop = make(chan struct{})
		close(w.stop)
		return
	}
	select {
	case <-w.stop:
	default:
		close(w.stop)
		<-w.done
	}
}

// watchStalls looks once a second whether records wait with no batch
// written since stallAfter, until stop.
func (s *Sink) watchStalls(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var waiting time.Time // since records wait with no batch written
	var next time.Time    // when to look next
	step := stallAfter
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			cl := s.client()
			buffered := cl.BufferedProduceRecords()
			if written := time.Unix(0, s.stalls.written.Load()); buffered == 0 || written.After(waiting) {
				waiting, next, step = now, now.Add(stallAfter), stallAfter
				continue
			}
			if now.Before(next) {
				continue
			}
			step = min(2*step, stallStepMax)
			next = now.Add(step)
			s.sayShortOfReplicas(ctx, cl, buffered, now.Sub(waiting), step)
		}
	}
}

// sayShortOfReplicas asks the brokers whether buffered records have waited
// for stalled because partitions they go to have too few replicas in
// sync, and says so at WARN for each topic with such partitions.
func (s *Sink) sayShortOfReplicas(ctx context.Context, cl *kgo.Client, buffered int64, stalled, step time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, produceRequestTimeout)
	defer cancel()
	short, err := shortOfReplicas(ctx, kadm.NewClient(cl), s.limits.known(maxLookup))
	if err != nil {
		s.log.Debug("records wait for Kafka's acknowledgement, and the in-sync replicas of the topics could not be read", "err", err)
	}
	for _, r := range short {
		s.log.Warn("the brokers refuse writes to a topic while fewer of its replicas are in sync than its min.insync.replicas (NOT_ENOUGH_REPLICAS, with acks=all); "+
			"the relay retries in order until they catch up, losing nothing, and reads on only while kafka.max_buffered_records leave room; bring the replicas back in sync, or lower the topic's min.insync.replicas",
			"topic", r.topic, "min_insync_replicas", r.minISR, "in_sync_replicas", r.inSync, "partitions", r.partitions,
			"waiting", stalled.Round(time.Second), "records_buffered", buffered, "next_warning_in", step)
	}
}

// shortReplicas is a topic some of whose partitions have fewer replicas
// in sync than its min.insync.replicas.
type shortReplicas struct {
	topic      string
	minISR     int
	inSync     int // the fewest in sync of those partitions
	partitions []int32
}

// shortOfReplicas reads, for topics (every topic the client may describe,
// when none), which partitions have fewer replicas in sync than the
// topic's min.insync.replicas, the partitions a produce with acks=all is
// refused for.
func shortOfReplicas(ctx context.Context, adm *kadm.Client, topics []string) ([]shortReplicas, error) {
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	names := details.Names()
	if len(names) > maxLookup {
		names = names[:maxLookup]
	}
	if len(names) == 0 {
		return nil, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("describe the config of %d topics: %w", len(names), err)
	}
	var short []shortReplicas
	var errs []error
	for _, rc := range rcs {
		minISR, err := configInt(kadm.ResourceConfigs{rc}, "min.insync.replicas", 1)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r := shortReplicas{topic: rc.Name, minISR: minISR, inSync: minISR}
		for _, p := range details[rc.Name].Partitions.Sorted() {
			if len(p.ISR) < minISR {
				r.partitions = append(r.partitions, p.Partition)
				r.inSync = min(r.inSync, len(p.ISR))
			}
		}
		if len(r.partitions) > 0 {
			short = append(short, r)
		}
	}
	slices.SortFunc(short, func(a, b shortReplicas) int { return strings.Compare(a.topic, b.topic) })
	return short, errors.Join(errs...)
}

// known lists up to n of the topics whose limits l knows: those the relay
// has published to.
func (l *limits) known(n int) []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	topics := make([]string, 0, min(n, len(l.topics)))
	for t := range l.topics {
		if len(topics) == n {
			break
		}
		topics = append(topics, t)
	}
	return topics
}
