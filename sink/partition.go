package sink

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
)

// partitioner picks a record's partition as the Java client does, by
// murmur2 of the key, unless its message named a partition
// ([connector.Message.Partition], Debezium's partition placement): then it
// is that one, as a ProducerRecord with a partition is in Java.
//
// franz-go asks for a partitioner per topic and keeps it as long as the
// topic, and kgo's StickyKeyPartitioner makes each one a random source of
// 5 KB for records without a key, which the relay's rarely have: with
// thousands of topics named by aggregate types, that is a large part of
// the relay's heap for nothing. So records with a key, which only need
// hashing, share one partitioner, and a topic gets a sticky one of its
// own at its first record without a key.
type partitioner struct {
	// keyed is kgo's, for records with a key, for which it only hashes
	// and keeps no state: any number of topics may use it at once. Its
	// OnNewBatch, which moves the sticky state of records without a key,
	// is never called.
	keyed kgo.TopicPartitioner
}

func newPartitioner() kgo.Partitioner {
	return partitioner{kgo.StickyKeyPartitioner(nil).ForTopic("")}
}

func (p partitioner) ForTopic(string) kgo.TopicPartitioner {
	return &topicPartitioner{keyed: p.keyed}
}

type topicPartitioner struct {
	keyed kgo.TopicPartitioner
	// unkeyed is the topic's own sticky partitioner for records without
	// a key, made at the first.
	unkeyed kgo.TopicPartitioner
}

func (p *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return explicitPartition(r) != nil || r.Key != nil
}

func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if e := explicitPartition(r); e != nil {
		if int(r.Partition) >= n {
			// kgo fails the record; this says why, for the promise.
			e.topicPartitions.Store(int32(n))
		}
		return int(r.Partition)
	}
	if r.Key != nil {
		return p.keyed.Partition(r, n)
	}
	if p.unkeyed == nil {
		p.unkeyed = kgo.StickyPartitioner().ForTopic("")
	}
	return p.unkeyed.Partition(r, n)
}

func (p *topicPartitioner) OnNewBatch() {
	if o, ok := p.unkeyed.(kgo.TopicPartitionerOnNewBatch); ok {
		o.OnNewBatch()
	}
}

// explicit marks a record whose partition was named, through the record's
// context; topicPartitions is set when the topic lacks that partition.
type explicit struct{ topicPartitions atomic.Int32 }

type explicitKey struct{}

func explicitPartition(r *kgo.Record) *explicit {
	if r.Context == nil {
		return nil
	}
	e, _ := r.Context.Value(explicitKey{}).(*explicit)
	return e
}

// withPartition sets rec's partition to the one m names. The returned
// check turns kgo's error for a partition the topic does not have into an
// [*connector.EventError], since retrying cannot create the partition.
func withPartition(ctx context.Context, rec *kgo.Record, m *connector.Message) func(error) error {
	if m.Partition == nil {
		return func(err error) error { return err }
	}
	e := &explicit{}
	rec.Partition = *m.Partition
	rec.Context = context.WithValue(ctx, explicitKey{}, e)
	return func(err error) error {
		if n := e.topicPartitions.Load(); err != nil && n > 0 {
			return &connector.EventError{EventID: m.EventID, Err: fmt.Errorf("the row names partition %d, and topic %s has %d partitions", rec.Partition, rec.Topic, n)}
		}
		return err
	}
}
