package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/outboxrelay/outboxrelay/connector"
)

// DefaultCheckpointTopic is kafka.checkpoint_topic's default.
const DefaultCheckpointTopic = "outboxrelay.checkpoints"

// CheckpointStore is a [connector.CheckpointStore] keeping checkpoints in a
// compacted Kafka topic, one record key per relay: compaction keeps the
// topic small, so reading a key's partition to its end on start is cheap.
// It has its own client, so a checkpoint never waits behind the events'
// produce buffer and an event flush never waits for a checkpoint.
type CheckpointStore struct {
	topic string
	key   connector.CheckpointKey
	// brokers are the ones the store's client was given, for errors.
	brokers []string
	// partitions is the topic's partition count, learnt when the store is
	// made: kadm answers from kgo's metadata cache, which does not yet
	// know a topic created a moment ago.
	partitions int
	cl         *kgo.Client
	log        *slog.Logger
	// txn writes the checkpoints in its transactions; nil: Save does.
	txn *Sink
	// foreign are the other clusters' checkpoints the last Load found.
	foreign []connector.Checkpoint
}

var _ connector.CheckpointStore = (*CheckpointStore)(nil)

// NewCheckpointStore returns a store for key in topic (empty: the
// default), creating the topic with cleanup.policy=compact when it is
// missing. cfg gives the brokers and security, as for the sink.
func NewCheckpointStore(ctx context.Context, cfg Config, topic string, key connector.CheckpointKey, opts ...Option) (*CheckpointStore, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if topic == "" {
		topic = DefaultCheckpointTopic
	}
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	kopts, err := ClientOptions(cfg)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts,
		kgo.WithLogger(kslog.New(o.log.With("component", "kafka-checkpoint"))),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// The same key-to-partition mapping Load computes below.
		// Save picks the partition (partitionFor), so every cluster's
		// checkpoint of one database and slot shares one.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic),
	)
	kopts = append(kopts, o.kgos...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: kafka client: %w", err)
	}
	s := &CheckpointStore{topic: topic, key: key, brokers: cfg.Brokers, cl: cl, log: o.log.With("component", "checkpoint"), txn: o.txn}
	if err := s.ensureTopic(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return s, nil
}

// aclError says which ACL is missing when err is an authorization error.
func (s *CheckpointStore) aclError(op string, err error) error {
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		need := map[string]string{
			"create": "CREATE on the cluster or on topic %q (or create the topic yourself with cleanup.policy=compact)",
			"write":  "WRITE on topic %q",
			"read":   "DESCRIBE and READ on topic %q",
		}[op]
		return fmt.Errorf("checkpoint topic %q: %s: %w; grant the relay's principal "+need+", or set kafka.checkpoint_topic to a topic it may use",
			s.topic, op, err, s.topic)
	}
	return fmt.Errorf("checkpoint topic %q: %s: %w", s.topic, op, unreachable(s.brokers, err))
}

func (s *CheckpointStore) ensureTopic(ctx context.Context) error {
	adm := kadm.NewClient(s.cl)
	details, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return s.aclError("read", err)
	}
	if d, ok := details[s.topic]; ok && d.Err == nil {
		s.partitions = len(d.Partitions)
		return nil
	} else if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return s.aclError("read", d.Err)
	}
	compact := "compact"
	// One partition: the topic holds one small record per relay.
	// Replication -1 takes the broker's default.
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, s.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return s.aclError("create", err)
	}
	s.partitions = 1
	s.log.Info("created checkpoint topic", "topic", s.topic, "cleanup.policy", compact)
	return nil
}

// partitionFor is the partition of the store's checkpoints: chosen by the
// database and slot alone, so that a relay moved to another cluster finds
// the checkpoints its old cluster left in the partition it reads.
func (s *CheckpointStore) partitionFor() int32 {
	family := []byte(connector.CheckpointKey{Database: s.key.Database, Slot: s.key.Slot}.String())
	return int32(newPartitioner().ForTopic(s.topic).Partition(&kgo.Record{Key: family}, s.partitions))
}

// stableWait bounds how long Load waits for a transaction open on the
// checkpoint partition to end.
const stableWait = 10 * time.Second

// stableEnd is where Load reads the partition to: the last stable offset,
// since a checkpoint in a transaction still open is not one yet, once it
// has reached the log's end as it was when Load began. Every relay writes
// to the one partition, so a transaction another relay has open there
// (exactly_once: for a moment at each commit, or until the broker's
// transaction timeout after a crash) would otherwise hide this relay's own
// checkpoints written after it began, and Load would return an older one:
// the slot, confirmed to the newer, would look moved by someone else.
func (s *CheckpointStore) stableEnd(ctx context.Context, adm *kadm.Client, part int32) (kadm.ListedOffset, error) {
	logEnds, err := adm.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return kadm.ListedOffset{}, s.aclError("read", err)
	}
	logEnd, _ := logEnds.Lookup(s.topic, part)
	if logEnd.Err != nil {
		return kadm.ListedOffset{}, s.aclError("read", logEnd.Err)
	}
	deadline := time.Now().Add(stableWait)
	for {
		ends, err := adm.ListCommittedOffsets(ctx, s.topic)
		if err != nil {
			return kadm.ListedOffset{}, s.aclError("read", err)
		}
		end, _ := ends.Lookup(s.topic, part)
		if end.Err != nil {
			return kadm.ListedOffset{}, s.aclError("read", end.Err)
		}
		if end.Offset >= logEnd.Offset {
			return end, nil
		}
		if time.Now().After(deadline) {
			// Not permanent: the relay starts again, and reads again.
			return kadm.ListedOffset{}, fmt.Errorf("checkpoint topic %q partition %d: a Kafka transaction has been open since offset %d for more than %s (a relay with kafka.delivery exactly_once, which may have stopped mid-commit and is then aborted at its transaction timeout), and the checkpoints after it cannot be read until it ends",
				s.topic, part, end.Offset, stableWait)
		}
		select {
		case <-ctx.Done():
			return kadm.ListedOffset{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Load reads the key's partition from its start to its end and returns
// the last record written under the key, or else the latest one another
// cluster wrote for the same database and slot; ForeignCheckpoints then
// has every other cluster's.
func (s *CheckpointStore) Load(ctx context.Context) (connector.Checkpoint, bool, error) {
	s.foreign = nil
	read, err := s.read(ctx)
	if err != nil {
		return connector.Checkpoint{}, false, err
	}
	if last := read.own; last != nil {
		if last.Value == nil {
			// A tombstone is the documented way to forget a relay's
			// position (docs/checkpoint.md); say that it happened.
			s.log.Warn("checkpoint deleted by a tombstone; starting as if none was ever written",
				"topic", s.topic, "key", s.key.String(), "offset", last.Offset)
			return connector.Checkpoint{}, false, nil
		}
		cp, err := connector.DecodeCheckpoint(s.key, last.Value)
		if err != nil {
			return connector.Checkpoint{}, false, s.unreadable(last, err)
		}
		return cp, true, nil
	}
	foreign, latest, err := s.decodeForeign(read)
	if err != nil || latest < 0 {
		return connector.Checkpoint{}, false, err
	}
	s.foreign = foreign
	return foreign[latest], true, nil
}

// decodeForeign decodes the other clusters' checkpoints a read found,
// leaving out those a tombstone deleted, and says which was written
// last (-1: none).
func (s *CheckpointStore) decodeForeign(read partitionRead) (foreign []connector.Checkpoint, latest int, err error) {
	latest = -1
	var at int64
	for _, r := range read.foreign {
		if r.Value == nil {
			continue // that cluster's relay was told to forget its position
		}
		k, _ := connector.ParseCheckpointKey(string(r.Key))
		cp, err := connector.DecodeCheckpoint(k, r.Value)
		if err != nil {
			return nil, -1, s.unreadable(r, err)
		}
		if latest < 0 || r.Offset > at {
			latest, at = len(foreign), r.Offset
		}
		foreign = append(foreign, cp)
	}
	return foreign, latest, nil
}

// ForeignCheckpoints are the checkpoints other clusters saved for the
// store's database and slot, as the last Load found them (one per cluster,
// in the order their keys first appear): which of them, if any, is this
// relay's past on the server it was moved from is for the caller to tell
// (cdc/foreign.go). Nil when the store holds its own, or after a Load that
// failed.
func (s *CheckpointStore) ForeignCheckpoints() []connector.Checkpoint { return s.foreign }

func (s *CheckpointStore) unreadable(r *kgo.Record, err error) error {
	return fmt.Errorf("checkpoint topic %q partition %d offset %d: %w; if the record cannot be trusted, see docs/checkpoint.md", s.topic, r.Partition, r.Offset, err)
}

// maxForeignKeys bounds the other clusters' checkpoints a read keeps:
// clusters whose database and slot share names are few, but the keys are
// whatever is in the topic.
const maxForeignKeys = 100

// partitionRead is what a read of the store's partition found: the last
// record under the store's key, and the last under each other cluster's
// key for the same database and slot.
type partitionRead struct {
	own     *kgo.Record
	foreign []*kgo.Record
}

// read reads the store's partition from its start to its stable end.
func (s *CheckpointStore) read(ctx context.Context) (partitionRead, error) {
	adm := kadm.NewClient(s.cl)
	part := s.partitionFor()
	starts, err := adm.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return partitionRead{}, s.aclError("read", err)
	}
	end, err := s.stableEnd(ctx, adm, part)
	if err != nil {
		return partitionRead{}, err
	}
	start, _ := starts.Lookup(s.topic, part)
	if start.Err != nil {
		return partitionRead{}, s.aclError("read", start.Err)
	}
	if end.Offset <= start.Offset {
		return partitionRead{}, nil
	}
	// A consumer of its own for this one read: the store's client
	// produces, and a client's consumed partitions are fixed when it is made.
	opts := append(s.cl.Opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		s.topic: {part: kgo.NewOffset().At(start.Offset)},
	}),
		// Checkpoints written in transactions count once committed; the
		// commit markers are kept so that the read knows it reached the
		// end (the last offset is often a marker, never a record).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	c, err := kgo.NewClient(opts...)
	if err != nil {
		return partitionRead{}, fmt.Errorf("checkpoint store: kafka client: %w", err)
	}
	defer c.Close()
	key := s.key.String()
	var read partitionRead
	foreign := map[string]int{} // key -> index in read.foreign
	// The last offset read to always holds a record, or a transaction's
	// marker, which this consumer keeps (Kafka never compacts the active
	// segment), so reading until it arrives ends; ctx bounds a broker that
	// never sends it.
	next := start.Offset
	for next < end.Offset {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return partitionRead{}, fmt.Errorf("checkpoint topic %q: read partition %d to offset %d (at %d): %w", s.topic, part, end.Offset, next, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return partitionRead{}, s.aclError("read", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			if string(r.Key) == key {
				read.own = r
				return
			}
			k, err := connector.ParseCheckpointKey(string(r.Key))
			if err != nil || !k.SameRelay(s.key) {
				return
			}
			if i, ok := foreign[string(r.Key)]; ok {
				read.foreign[i] = r
			} else if len(foreign) < maxForeignKeys {
				foreign[string(r.Key)] = len(read.foreign)
				read.foreign = append(read.foreign, r)
			}
		})
	}
	return read, nil
}

// ReadCheckpoints reads what topic (empty: the default) holds for the
// relay named key, creating nothing: its own checkpoint (found false when
// there is none, or a tombstone deleted it) and the ones other clusters
// saved for the same database and slot, whether or not it has its own. A
// topic that does not exist holds none. For outboxrelay check.
func ReadCheckpoints(ctx context.Context, cfg Config, topic string, key connector.CheckpointKey) (own connector.Checkpoint, found bool, foreign []connector.Checkpoint, err error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return connector.Checkpoint{}, false, nil, err
	}
	if topic == "" {
		topic = DefaultCheckpointTopic
	}
	kopts, err := ClientOptions(cfg)
	if err != nil {
		return connector.Checkpoint{}, false, nil, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return connector.Checkpoint{}, false, nil, fmt.Errorf("checkpoint store: kafka client: %w", err)
	}
	defer cl.Close()
	s := &CheckpointStore{topic: topic, key: key, brokers: cfg.Brokers, cl: cl, log: slog.New(slog.DiscardHandler)}
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return connector.Checkpoint{}, false, nil, s.aclError("read", err)
	}
	d, ok := details[topic]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return connector.Checkpoint{}, false, nil, nil
	case d.Err != nil:
		return connector.Checkpoint{}, false, nil, s.aclError("read", d.Err)
	}
	s.partitions = len(d.Partitions)
	read, err := s.read(ctx)
	if err != nil {
		return connector.Checkpoint{}, false, nil, err
	}
	if foreign, _, err = s.decodeForeign(read); err != nil {
		return connector.Checkpoint{}, false, nil, err
	}
	if read.own != nil && read.own.Value != nil {
		if own, err = connector.DecodeCheckpoint(key, read.own.Value); err != nil {
			return connector.Checkpoint{}, false, nil, s.unreadable(read.own, err)
		}
		found = true
	}
	return own, found, foreign, nil
}

// Save writes cp and waits for Kafka to acknowledge it with acks=all. With
// WithTransactions it does nothing: the sink has committed cp already.
func (s *CheckpointStore) Save(ctx context.Context, cp connector.Checkpoint) error {
	saved := make(chan error, 1)
	s.SaveAsync(ctx, cp, func(err error) { saved <- err })
	return <-saved
}

// SaveAsync writes cp as Save does, without waiting: done gets what Save
// would return, once, on the store's client's goroutine (or on the
// caller's, when there is nothing to write), so it must not block. Saves
// to the store's one partition are acknowledged in the order they were
// made.
func (s *CheckpointStore) SaveAsync(ctx context.Context, cp connector.Checkpoint, done func(error)) {
	if s.txn != nil {
		done(nil)
		return
	}
	m, err := s.Message(cp)
	if err != nil {
		done(err)
		return
	}
	s.cl.Produce(ctx, &kgo.Record{Key: m.Key, Value: m.Value, Partition: *m.Partition}, func(_ *kgo.Record, err error) {
		if err != nil {
			err = s.aclError("write", err)
		}
		done(err)
	})
}

// Message returns the record that saves cp.
func (s *CheckpointStore) Message(cp connector.Checkpoint) (*connector.Message, error) {
	cp.Key = s.key
	if cp.Written.IsZero() {
		cp.Written = time.Now()
	}
	v, err := connector.EncodeCheckpoint(cp)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode: %w", err)
	}
	part := s.partitionFor()
	return &connector.Message{Topic: s.topic, Key: []byte(s.key.String()), Value: v, Timestamp: cp.Written, Partition: &part}, nil
}

// Fence makes the store's sink the one writer of the relay's transactions
// ([Sink.Fence]); without transactions it does nothing.
func (s *CheckpointStore) Fence(ctx context.Context) error {
	if s.txn == nil {
		return nil
	}
	return s.txn.Fence(ctx)
}

// Transactions reports whether the checkpoints are written in the sink's
// transactions.
func (s *CheckpointStore) Transactions() bool { return s.txn != nil }

// Close closes the store's client.
func (s *CheckpointStore) Close() { s.cl.Close() }
