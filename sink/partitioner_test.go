package sink

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The relay's partitioner places every record as kgo's StickyKeyPartitioner
// does, which is the Java client's placement, but keeps no state for a
// topic until it sees a record without a key: franz-go keeps a partitioner
// for every topic it ever produced to, and a random source of 5 KB for
// each of thousands of topics is a large part of the relay's heap.
func TestPartitionerKeepsNoStatePerTopic(t *testing.T) {
	stock := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	ours := newPartitioner().ForTopic("t").(*topicPartitioner)
	for i := range 1000 {
		r := &kgo.Record{Topic: "t", Key: fmt.Appendf(nil, "aggregate-%d", i)}
		for _, n := range []int{1, 3, 8, 100} {
			if got, want := ours.Partition(r, n), stock.Partition(r, n); got != want {
				t.Fatalf("key %s, %d partitions: partition %d, want %d as kgo's", r.Key, n, got, want)
			}
		}
		if !ours.RequiresConsistency(r) {
			t.Fatalf("a keyed record does not require consistency")
		}
	}
	ours.OnNewBatch()
	if ours.unkeyed != nil {
		t.Fatal("the topic's partitioner has sticky state before any record without a key")
	}
	// An empty key is a key.
	if got, want := ours.Partition(&kgo.Record{Key: []byte{}}, 8), stock.Partition(&kgo.Record{Key: []byte{}}, 8); got != want {
		t.Errorf("empty key: partition %d, want %d", got, want)
	}
	// Records without a key stick to one partition until a batch is
	// done, then move to another.
	r := &kgo.Record{Topic: "t"}
	if ours.RequiresConsistency(r) {
		t.Error("a record without a key requires consistency")
	}
	first := ours.Partition(r, 8)
	for range 10 {
		if p := ours.Partition(r, 8); p != first {
			t.Fatalf("records without a key went to %d, then %d, in one batch", first, p)
		}
	}
	ours.OnNewBatch()
	if p := ours.Partition(r, 8); p == first {
		t.Errorf("after a new batch, records without a key still go to %d", first)
	}
}

// BenchmarkPartitionerForTopic is what each new topic costs the
// partitioner: franz-go keeps it for as long as the client.
func BenchmarkPartitionerForTopic(b *testing.B) {
	p := newPartitioner()
	r := &kgo.Record{Key: []byte("aggregate-1")}
	b.ReportAllocs()
	for b.Loop() {
		p.ForTopic("t").Partition(r, 8)
	}
}
