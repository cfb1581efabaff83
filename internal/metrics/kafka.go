package metrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kafkaHooks are kprom's hooks, except the one that counts the bytes
// produced (outboxrelay_kafka_produce_bytes_total), which is the relay's
// own. franz-go calls it for every partition batch of every produce
// request, which with kafka.linger 0 at a steady rate is about once per
// record, and kprom's builds and hashes a label map each time, allocating
// (BenchmarkProduceBatchWritten compares the two). This one looks up each
// broker's and topic's counter once. The metric is the same: kprom's name,
// labels and help; but topics past the bound of [WithMaxTopics] share the
// label [OtherTopics], as in the relay's own metrics.
type kafkaHooks struct {
	*kprom.Metrics // every other hook
	produced       *prometheus.CounterVec
	// batchRecords is the relay's own: how many records each partition
	// batch carried, which tells how well the producer batches. kprom's
	// counters of batches and records would say it too, but it registers
	// them whether or not its hook counts, and that hook is ours.
	batchRecords prometheus.Histogram
	topics       *topicLabels

	mu sync.Mutex
	// clients counts the clients open with these hooks: the sink
	// replaces its client now and then (sink.Sink.renew), opening the new
	// one before it closes the old, and kprom registers its collectors for
	// each new client (a second registration panics) and unregisters them
	// when any closes.
	clients int
	// children holds a counter for every broker and topic label produced
	// to, as the vector does; labels bounds them.
	children map[produceKey]prometheus.Counter
}

type produceKey struct {
	node  int32
	topic string
}

func newKafkaHooks(reg prometheus.Registerer, topics *topicLabels) (*kafkaHooks, error) {
	h := &kafkaHooks{
		// ConsistentNaming renames kprom's own produce counter, which it
		// registers though its hook never runs, out of the way of ours;
		// the other details are kprom's defaults.
		Metrics: kprom.NewMetrics(Namespace, kprom.Subsystem("kafka"), kprom.Registerer(reg),
			kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.UncompressedBytes, kprom.ConsistentNaming)),
		produced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "kafka", Name: "produce_bytes_total",
			Help: "Total number of uncompressed bytes produced",
		}, []string{"node_id", "topic"}),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "produce_batch_records",
			Help:    "Records in each partition batch of a produce request: fewer, larger batches cost the broker and the relay less.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13), // 1 to 4096
		}),
		topics:   topics,
		children: map[produceKey]prometheus.Counter{},
	}
	return h, errors.Join(reg.Register(h.produced), reg.Register(h.batchRecords))
}

// OnNewClient implements [kgo.HookNewClient]: kprom's, for the first
// client open.
func (h *kafkaHooks) OnNewClient(cl *kgo.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients++
	if h.clients == 1 {
		h.Metrics.OnNewClient(cl)
	}
}

// OnClientClosed implements [kgo.HookClientClosed]: kprom's, for the last
// client open.
func (h *kafkaHooks) OnClientClosed(cl *kgo.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients--
	if h.clients == 0 {
		h.Metrics.OnClientClosed(cl)
	}
}

// OnProduceBatchWritten implements [kgo.HookProduceBatchWritten].
func (h *kafkaHooks) OnProduceBatchWritten(meta kgo.BrokerMetadata, topic string, _ int32, m kgo.ProduceBatchMetrics) {
	k := produceKey{meta.NodeID, h.topics.label(topic)}
	h.mu.Lock()
	c, ok := h.children[k]
	if !ok {
		c = h.produced.WithLabelValues(kgo.NodeName(meta.NodeID), k.topic)
		h.children[k] = c
	}
	h.mu.Unlock()
	c.Add(float64(m.UncompressedBytes))
	h.batchRecords.Observe(float64(m.NumRecords))
}
