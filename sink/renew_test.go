package sink

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// franz-go keeps every topic a client has produced to, and its work per
// new topic grows with that number, so the sink replaces its client once
// it has published to maxClientTopics. Nothing is lost or
// refused across a renewal, including records to a topic the old client
// had written to (the new producer id starts its sequences afresh), and
// Client is the new client.
func TestSinkRenewsItsClientPastMaxClientTopics(t *testing.T) {
	defer func(n int) { maxClientTopics = n }(maxClientTopics)
	maxClientTopics = 3
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := New(Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clients := map[*kgo.Client]bool{}
	const rounds, topics = 3, 7
	errs := make(chan error, rounds*topics)
	for r := range rounds {
		for i := range topics {
			m := &connector.Message{Topic: fmt.Sprintf("t%d", i), Key: []byte("k"), Value: []byte(fmt.Sprint(r)), EventID: fmt.Sprintf("e%d-%d", r, i)}
			if err := s.Publish(ctx, m, func(err error) { errs <- err }); err != nil {
				t.Fatal(err)
			}
			clients[s.Client()] = true
			if n := len(s.clientTopics); n > maxClientTopics {
				t.Fatalf("the client has published to %d topics, bound %d", n, maxClientTopics)
			}
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a record failed across client renewals: %v", err)
		}
	}
	// 21 records to 7 topics, 3 a client: a new client every 3 topics.
	if want := rounds * topics / maxClientTopics; len(clients) != want {
		t.Errorf("%d clients published, want %d", len(clients), want)
	}
	var all []string
	for i := range topics {
		all = append(all, fmt.Sprintf("t%d", i))
	}
	recs := testenv.Consume(ctx, t, brokers, all, rounds*topics)
	seen := map[string][]string{}
	for _, r := range recs {
		seen[r.Topic] = append(seen[r.Topic], string(r.Value))
	}
	for _, topic := range all {
		if got := fmt.Sprint(seen[topic]); got != "[0 1 2]" {
			t.Errorf("topic %s holds %s, want [0 1 2] in order", topic, got)
		}
	}
}

// With transactions the client is never replaced: a new one would fence
// the old one's transactional id.
func TestSinkKeepsItsTransactionalClient(t *testing.T) {
	defer func(n int) { maxClientTopics = n }(maxClientTopics)
	maxClientTopics = 1
	_, brokers := testenv.Kafka(t)
	s, err := New(Config{Brokers: brokers, TransactionalID: "tx"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl := s.Client()
	for i := range 3 {
		if err := s.renew(context.Background(), fmt.Sprintf("t%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Client() != cl {
		t.Error("the transactional sink replaced its client")
	}
}

// A topic whose own max.message.bytes is smaller than the broker's and is
// found only after the client took the broker's as the topic's batch size
// (franz-go asks once, when it learns the partitions): the sink replaces
// its client, so that batches of small records are cut at the topic's
// limit, not refused by the broker.
func TestSinkRenewsItsClientForATopicLimitFoundLate(t *testing.T) {
	const broker, small = 100000, 5000
	cluster, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(1), kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(broker)}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr(fmt.Sprint(small))}, "overridden"); err != nil {
		t.Fatal(err)
	}
	// Topic lookups are refused until allowed.
	var allowed atomic.Bool
	cluster.ControlKey(int16(kmsg.DescribeConfigs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kr.(*kmsg.DescribeConfigsRequest)
		if allowed.Load() || len(req.Resources) == 0 || req.Resources[0].ResourceType != kmsg.ConfigResourceTypeTopic {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, kerr.TopicAuthorizationFailed.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	s, err := New(Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errs := make(chan error, 1000)
	publish := func(n int) {
		t.Helper()
		for i := range n {
			m := &connector.Message{Topic: "overridden", Key: []byte("k"), Value: make([]byte, 400), EventID: fmt.Sprint("e", i)}
			if err := s.Publish(ctx, m, func(err error) { errs <- err }); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish(1) // the client learns the partition, with the broker's limit
	first := s.Client()
	allowed.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for s.limits.smallerFound() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the topic's own limit was not found in 30s")
		}
		publish(1) // asks again
		time.Sleep(50 * time.Millisecond)
	}
	publish(200)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a small record to a topic with a smaller limit failed: %v", err)
		}
	}
	if s.Client() == first {
		t.Error("the client that took the broker's limit as the topic's batch size is still in use")
	}
}
