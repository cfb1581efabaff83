package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/outboxrelay/outboxrelay/connector"
)

// producer is what the sink uses of *kgo.Client.
type producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	AbortBufferedRecords(ctx context.Context) error
	Close()
}

// Sink is a [connector.Sink] writing to Kafka.
type Sink struct {
	cfg Config
	log *slog.Logger

	// mu guards cl and p, which renew replaces; Client, Flush and Abort
	// are called from other goroutines. renew runs on the publishing
	// goroutine, the only one that writes them, so Publish and renew
	// read them without the lock: nothing can change them meanwhile.
	mu sync.Mutex
	cl *kgo.Client
	p  producer
	// kopts make a client like cl (renew).
	kopts []kgo.Opt
	// clientTopics are the topics cl has published to, up to
	// maxClientTopics.
	clientTopics map[string]struct{}
	// smaller is limits.smallerFound when cl was made.
	smaller int

	limits *limits
	// topics creates topics before their first record; nil unless
	// kafka.topic_creation is enabled (topics.go).
	topics *creator
	// txn is the open transaction's state; nil without transactions.
	txn *txnState
	// stalls watches for records that wait for acknowledgements the
	// brokers refuse for want of in-sync replicas (replicas.go).
	stalls *stallWatch
}

var _ connector.Sink = (*Sink)(nil)

// Option wires a sink to its surroundings.
type Option func(*options)

type options struct {
	log  *slog.Logger
	kgos []kgo.Opt
	// txn: the checkpoint store's records are written by this sink, in
	// its transactions (WithTransactions).
	txn *Sink
}

// WithTransactions makes a checkpoint store leave the writing to snk,
// which commits each checkpoint in the transaction of the events it covers
// (kafka.delivery exactly_once).
func WithTransactions(snk *Sink) Option { return func(o *options) { o.txn = snk } }

// WithLogger sets the logger for the sink and the Kafka client.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClientOptions adds franz-go client options: TLS, SASL, hooks.
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(o *options) { o.kgos = append(o.kgos, opts...) }
}

// The Kafka client's bounds on a silent broker connection (see New).
const (
	produceRequestTimeout  = 5 * time.Second
	requestTimeoutOverhead = 5 * time.Second
)

// New returns a sink for cfg. It does not contact the brokers; the first
// Publish does.
func New(cfg Config, opts ...Option) (*Sink, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	codec, _ := compression(cfg.Compression)
	// Brokers, client id, TLS and SASL: the same as `outboxrelay check`.
	kopts, err := ClientOptions(cfg)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts,
		kgo.WithLogger(kslog.New(o.log.With("component", "kafka"))),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// The Java client's default for keyed records: murmur2 of the key.
		// Pinned, because kgo's default partitioner differs.
		kgo.RecordPartitioner(newPartitioner()),
		kgo.ProducerBatchCompression(codec),
		kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
		kgo.ProducerLinger(cfg.Linger),
		kgo.MaxBufferedBytes(cfg.MaxBufferedBytes),
		// Without this, a sequence error makes kgo reset the producer id and
		// go on, which can reorder an aggregate's events; failing instead
		// restarts the relay from its checkpoint, in order.
		kgo.StopProducerOnDataLossDetected(),
		kgo.AllowAutoTopicCreation(),
		// A connection to a broker that went silent (a NAT or firewall
		// forgot it) is only noticed when a request's read deadline
		// passes: for a produce request, the broker's own timeout plus
		// this overhead, 10s and 10s by default. That held the relay up for
		// about 20s after a silent drop (integration/deadconn_test.go);
		// 5s and 5s halve it. A broker that cannot get its replicas'
		// acknowledgements within 5s answers with a timeout error, which
		// kgo retries on the same connection: no spurious reconnect.
		kgo.ProduceRequestTimeout(produceRequestTimeout),
		kgo.RequestTimeoutOverhead(requestTimeoutOverhead),
	)
	lim := &limits{fixed: cfg.MaxRecordBytes, sync: cfg.TransactionalID != "", log: o.log.With("component", "sink")}
	stalls := &stallWatch{}
	kopts = append(kopts, kgo.ProducerBatchMaxBytesFn(lim.batch), kgo.WithHooks(stalls))
	if cfg.TransactionalID != "" {
		kopts = append(kopts, kgo.TransactionalID(cfg.TransactionalID), kgo.TransactionTimeout(cfg.TransactionTimeout))
	}
	kopts = append(kopts, o.kgos...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	s := &Sink{cfg: cfg, cl: cl, p: cl, kopts: kopts, log: o.log.With("component", "sink"), limits: lim, stalls: stalls}
	if cfg.TransactionalID != "" {
		s.txn = &txnState{}
	}
	if cfg.TopicCreation.Enabled {
		s.topics = &creator{cfg: cfg.TopicCreation, known: map[string]struct{}{}, refused: map[string]refusal{}, now: time.Now}
	}
	return s, nil
}

// Client is the underlying franz-go client, for health checks and metrics.
func (s *Sink) Client() *kgo.Client { return s.client() }

func (s *Sink) client() *kgo.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cl
}

func (s *Sink) producer() producer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// maxClientTopics is how many topics one Kafka client publishes to before
// the sink replaces it (renew). franz-go keeps state for every topic a
// client has produced to, for good, and its work for each new topic grows
// with the number it knows (it copies its map of topics and asks for the
// metadata of all of them), so a client that has seen tens of thousands
// of topics, one per aggregate type, is slow to take a new one and holds
// much memory. 2000 is far more than a relay publishes to by design, so
// that the flush and reconnect a renewal costs stay rare.
var maxClientTopics = 2000

// renew replaces the Kafka client by a new one, which knows no topics,
// once the current one has published to maxClientTopics topics and topic
// is not one of them, or when a topic was found to take less than the
// broker after the client may have taken the broker's limit as its batch
// size (limits). It flushes first, so nothing is in flight: a new
// client has a new producer id, and the idempotent producer's sequence
// numbers start again under it, which is safe only for a partition with
// nothing outstanding. Not with transactions: a new client with the
// transactional id would fence the old one.
func (s *Sink) renew(ctx context.Context, topic string) error {
	if s.txn != nil {
		return nil
	}
	if s.clientTopics == nil {
		s.clientTopics = map[string]struct{}{}
	}
	smaller := s.limits.smallerFound()
	if smaller == s.smaller {
		if _, ok := s.clientTopics[topic]; ok {
			return nil
		}
		if len(s.clientTopics) < maxClientTopics {
			s.clientTopics[topic] = struct{}{}
			return nil
		}
	}
	old := s.cl
	if s.p != producer(old) {
		return nil // a test's producer
	}
	if err := old.Flush(ctx); err != nil {
		return fmt.Errorf("flush before a new Kafka client: %w", err)
	}
	cl, err := kgo.NewClient(s.kopts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	s.mu.Lock()
	s.cl, s.p = cl, cl
	s.mu.Unlock()
	old.Close()
	s.log.Info("a new Kafka client, the last one having published to its bound of topics or taken a batch size larger than a topic takes", "topics", len(s.clientTopics), "max_topics", maxClientTopics)
	s.smaller = smaller
	clear(s.clientTopics)
	s.clientTopics[topic] = struct{}{}
	return nil
}

// Publish implements [connector.Sink].
func (s *Sink) Publish(ctx context.Context, m *connector.Message, done func(error)) error {
	s.startWatch()
	if err := s.renew(ctx, m.Topic); err != nil {
		return s.explain(err)
	}
	if s.topics != nil {
		if err := s.topics.ensure(ctx, s.cl, m.Topic); err != nil {
			if refused := (*TopicRefusedError)(nil); errors.As(err, &refused) {
				return &connector.EventError{EventID: m.EventID, Err: refused}
			}
			return s.explain(err)
		}
	}
	limit, err := s.limits.get(ctx, s.cl, m.Topic)
	if err != nil {
		return s.explain(err)
	}
	rec := &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
	if len(m.Headers) > 0 {
		rec.Headers = make([]kgo.RecordHeader, len(m.Headers))
		for i, h := range m.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	size := m.Size()
	if size > limit {
		return &connector.EventError{EventID: m.EventID, Err: &connector.RecordTooLargeError{Size: size, Limit: limit}}
	}
	id := m.EventID
	partitioned := withPartition(ctx, rec, m)
	if s.txn != nil {
		return s.produceInTxn(ctx, rec, func(err error) error { return partitioned(classify(id, rec.Topic, size, err)) }, done)
	}
	s.p.Produce(ctx, rec, func(r *kgo.Record, err error) {
		done(partitioned(classify(id, r.Topic, size, err)))
	})
	return nil
}

// explain is err, from talking to the brokers, with what the user needs to
// read: TLS and SASL problems explained (ExplainConnError), a broker that
// could not be reached named with the brokers (unreachable).
func (s *Sink) explain(err error) error {
	return unreachable(s.cfg.Brokers, ExplainConnError(s.cfg, err))
}

// unreachable is err as a [connector.ConnectError] naming brokers when a
// broker could not be dialled (refused, no route, a name that does not
// resolve, no answer within the dial timeout), so that the relay's log
// names Kafka and where it looked; other errors are returned as they are.
func unreachable(brokers []string, err error) error {
	var op *net.OpError
	if connector.IsPermanent(err) || !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	return &connector.ConnectError{Service: "Kafka", Addr: strings.Join(brokers, ","), Err: op}
}

// Flush implements [connector.Sink].
func (s *Sink) Flush(ctx context.Context) error { return s.producer().Flush(ctx) }

// Abort implements [connector.Sink]; in a transaction it aborts it.
func (s *Sink) Abort(ctx context.Context) error {
	if s.txn != nil {
		return s.abortTxn(ctx, errAborted)
	}
	return s.producer().AbortBufferedRecords(ctx)
}

// Close releases the client. Call it after the runner has returned.
func (s *Sink) Close() {
	s.stopWatch()
	s.limits.close()
	s.producer().Close()
}
