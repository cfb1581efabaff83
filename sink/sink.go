package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
	cl  *kgo.Client
	p   producer
	log *slog.Logger

	limitOnce sync.Mutex
	limit     int // largest record accepted; 0 until read from the broker
}

var _ connector.Sink = (*Sink)(nil)

// Option wires a sink to its surroundings.
type Option func(*options)

type options struct {
	log  *slog.Logger
	kgos []kgo.Opt
}

// WithLogger sets the logger for the sink and the Kafka client.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClientOptions adds franz-go client options: TLS, SASL, hooks.
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(o *options) { o.kgos = append(o.kgos, opts...) }
}

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
		kgo.MaxBufferedBytes(cfg.MaxBufferedBytes),
		// Without this, a sequence error makes kgo reset the producer id and
		// go on, which can reorder an aggregate's events; failing instead
		// restarts the relay from its checkpoint, in order.
		kgo.StopProducerOnDataLossDetected(),
		kgo.AllowAutoTopicCreation(),
	)
	if cfg.MaxRecordBytes > 0 {
		kopts = append(kopts, kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes)))
	}
	cl, err := kgo.NewClient(append(kopts, o.kgos...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &Sink{cfg: cfg, cl: cl, p: cl, log: o.log.With("component", "sink"), limit: cfg.MaxRecordBytes}, nil
}

// Client is the underlying franz-go client, for health checks and metrics.
func (s *Sink) Client() *kgo.Client { return s.cl }

// Publish implements [connector.Sink].
func (s *Sink) Publish(ctx context.Context, m *connector.Message, done func(error)) error {
	limit, err := s.recordLimit(ctx)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
	if len(m.Headers) > 0 {
		rec.Headers = make([]kgo.RecordHeader, len(m.Headers))
		for i, h := range m.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	if size := RecordSize(rec); size > limit {
		return &connector.EventError{EventID: m.EventID, Err: &connector.RecordTooLargeError{Size: size, Limit: limit}}
	}
	id := m.EventID
	partitioned := withPartition(ctx, rec, m)
	s.p.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		done(partitioned(classify(id, err)))
	})
	return nil
}

// classify turns the errors that say this record can never be written into
// an [*connector.EventError]; the others stay retryable.
func classify(eventID string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return &connector.EventError{EventID: eventID, Err: fmt.Errorf("the broker refused the record as too large (the topic's max.message.bytes): %w", err)}
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.CorruptMessage):
		return &connector.EventError{EventID: eventID, Err: fmt.Errorf("the broker refused the record: %w", err)}
	}
	return fmt.Errorf("produce event %s: %w", eventID, err)
}

// Flush implements [connector.Sink].
func (s *Sink) Flush(ctx context.Context) error { return s.p.Flush(ctx) }

// Abort implements [connector.Sink].
func (s *Sink) Abort(ctx context.Context) error { return s.p.AbortBufferedRecords(ctx) }

// Close releases the client. Call it after the runner has returned.
func (s *Sink) Close() { s.p.Close() }

// recordLimit returns the largest record the broker accepts, asking it the
// first time.
func (s *Sink) recordLimit(ctx context.Context) (int, error) {
	s.limitOnce.Lock()
	defer s.limitOnce.Unlock()
	if s.limit > 0 {
		return s.limit, nil
	}
	limit, err := BrokerRecordLimit(ctx, s.cl)
	if err != nil {
		return 0, ExplainConnError(s.cfg, err)
	}
	s.limit = limit
	s.log.Info("read the broker's record size limit", "message_max_bytes", limit)
	return limit, nil
}

// BrokerRecordLimit reads message.max.bytes from a broker of cl's cluster.
func BrokerRecordLimit(ctx context.Context, cl *kgo.Client) (int, error) {
	adm := kadm.NewClient(cl)
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
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, fmt.Errorf("describe broker %s config: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "message.max.bytes" && c.Value != nil {
				n, err := strconv.Atoi(*c.Value)
				if err != nil || n <= 0 {
					return 0, fmt.Errorf("broker %s: message.max.bytes %q is not a positive number", rc.Name, *c.Value)
				}
				return n, nil
			}
		}
	}
	// Kafka's own default, when the broker does not say.
	return 1048588, nil
}
