package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// A message that names its partition (Debezium's partition placement)
// lands there whatever its key; one naming a partition the topic lacks is
// an error naming the event, not a retry.
func TestExplicitPartition(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.SeedTopics(4, "parts"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sink.New(sink.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	publish := func(id string, p int32) chan error {
		done := make(chan error, 1)
		m := &connector.Message{Topic: "parts", Key: []byte("same-key"), Value: []byte(id), EventID: id, Partition: &p}
		if err := s.Publish(ctx, m, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		return done
	}
	for _, p := range []int32{0, 3} {
		if err := <-publish("ok", p); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}
	err = <-publish("ev-9", 9)
	var ee *connector.EventError
	if !errors.As(err, &ee) || ee.EventID != "ev-9" {
		t.Fatalf("partition 9 of 4: %v; want an EventError naming ev-9", err)
	}
	got := map[int32]bool{}
	for _, r := range testenv.Consume(ctx, t, brokers, []string{"parts"}, 2) {
		got[r.Partition] = true
	}
	if !got[0] || !got[3] {
		t.Errorf("records on partitions %v, want 0 and 3", got)
	}
}
