package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// The state of replays and redrives is kept in a compacted topic of
// their own, <kafka.checkpoint_topic>.replay by default, never in the
// relay's checkpoint topic: the relay reads its checkpoint partition to
// the end at every start, and a replay's records, or a transaction a
// replay holds open there, would be in its way. One record per key:
// "replay/<id>" is how far that replay got, "redrive/<topic>/<partition>"
// which dead letters of that partition were sent on or set aside. With
// kafka.delivery exactly_once each is written in the Kafka transaction of
// the records it covers, so that it says exactly what a read_committed
// consumer sees; otherwise right after Kafka acknowledged them, so that a
// crash in between sends those records once more.

// DefaultStateTopicSuffix is put after kafka.checkpoint_topic to name the
// state topic by default.
const DefaultStateTopicSuffix = ".replay"

// store reads the state topic. Its records are written by the publisher's
// sink, in its transactions when it has them.
type store struct {
	topic string
	cl    *kgo.Client
	log   *slog.Logger
}

// openStore opens the state topic, creating it with cleanup.policy=compact
// and one partition when it is missing.
func openStore(ctx context.Context, sc sink.Config, topic string, log *slog.Logger) (*store, error) {
	s, _, err := openStoreIf(ctx, sc, topic, log, true)
	return s, err
}

// openStoreIf is openStore, creating the topic only when create is set;
// exists says whether it was there.
func openStoreIf(ctx context.Context, sc sink.Config, topic string, log *slog.Logger, create bool) (*store, bool, error) {
	if err := connector.ValidTopic(topic); err != nil {
		return nil, false, fmt.Errorf("state topic (--state-topic): %w", err)
	}
	opts, err := sink.ClientOptions(sc)
	if err != nil {
		return nil, false, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, false, fmt.Errorf("state topic: kafka client: %w", err)
	}
	s := &store{topic: topic, cl: cl, log: log}
	exists, err := s.ensure(ctx, create)
	if err != nil {
		cl.Close()
		return nil, false, err
	}
	return s, exists, nil
}

func (s *store) Close() { s.cl.Close() }

func (s *store) fail(op string, err error) error {
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return fmt.Errorf("state topic %q: %s: %w; grant the principal CREATE, DESCRIBE, READ and WRITE on it, or create it yourself (cleanup.policy=compact, one partition), or name another with --state-topic", s.topic, op, err)
	}
	return fmt.Errorf("state topic %q: %s: %w", s.topic, op, err)
}

func (s *store) ensure(ctx context.Context, create bool) (exists bool, err error) {
	adm := kadm.NewClient(s.cl)
	details, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return false, s.fail("describe", err)
	}
	if d, ok := details[s.topic]; ok && d.Err == nil {
		return true, nil
	} else if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return false, s.fail("describe", d.Err)
	}
	if !create {
		return false, nil
	}
	compact := "compact"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, s.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return false, s.fail("create", err)
	}
	s.log.Info("created the replay state topic", "component", "replay", "topic", s.topic, "cleanup.policy", compact)
	return true, nil
}

// stableWait bounds how long load waits for a transaction another replay
// holds open on the state topic.
const stableWait = 30 * time.Second

// load reads the topic to its end and calls each with the last value of
// every key that starts with prefix (nil for a tombstone).
func (s *store) load(ctx context.Context, prefix string, each func(key string, value []byte)) error {
	adm := kadm.NewClient(s.cl)
	end, err := s.stableEnd(ctx, adm)
	if err != nil || end == 0 {
		return err
	}
	starts, err := adm.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return s.fail("read", err)
	}
	start, _ := starts.Lookup(s.topic, 0)
	c, err := kgo.NewClient(append(s.cl.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(start.Offset)}}),
		// Records of a transaction count once committed; the markers
		// tell the read it reached the end.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return fmt.Errorf("state topic: kafka client: %w", err)
	}
	defer c.Close()
	last := map[string][]byte{}
	for next := start.Offset; next < end; {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return s.fail(fmt.Sprintf("read to offset %d (at %d)", end, next), err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return s.fail("read", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() && strings.HasPrefix(string(r.Key), prefix) {
				last[string(r.Key)] = r.Value
			}
		})
	}
	for k, v := range last {
		each(k, v)
	}
	return nil
}

// stableEnd is the offset to read to: the log's end as load began, once no
// transaction open before it hides what follows.
func (s *store) stableEnd(ctx context.Context, adm *kadm.Client) (int64, error) {
	logEnds, err := adm.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return 0, s.fail("read", err)
	}
	logEnd, _ := logEnds.Lookup(s.topic, 0)
	if logEnd.Err != nil {
		return 0, s.fail("read", logEnd.Err)
	}
	deadline := time.Now().Add(stableWait)
	for {
		ends, err := adm.ListCommittedOffsets(ctx, s.topic)
		if err != nil {
			return 0, s.fail("read", err)
		}
		lso, _ := ends.Lookup(s.topic, 0)
		if lso.Err != nil {
			return 0, s.fail("read", lso.Err)
		}
		if lso.Offset >= logEnd.Offset {
			return logEnd.Offset, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("state topic %q: a Kafka transaction has been open since offset %d for more than %s (a replay or redrive with kafka.delivery exactly_once that stopped mid-commit is aborted at its transaction timeout); try again then", s.topic, lso.Offset, stableWait)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// message is the record that saves value under key.
func (s *store) message(key string, value []byte) *connector.Message {
	part := int32(0)
	return &connector.Message{Topic: s.topic, Key: []byte(key), Value: value, Timestamp: time.Now(), EventID: key, Partition: &part}
}
