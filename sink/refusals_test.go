package sink_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

// lockedBuffer is a log destination safe for the Kafka client's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSinkNamesWhatTheBrokersRefuse: what a broker the relay did not set
// up refuses (a topic missing where topics are not created on first use, a
// write or a config lookup its ACLs do not grant) is an error naming the
// topic and what to do, and one that holds publishing up for the readiness
// probe (HeldUpTopic): the topic, or every topic when the broker's own
// limit cannot be read.
func TestSinkNamesWhatTheBrokersRefuse(t *testing.T) {
	const topic = "outbox.event.order"
	topicACL := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	clusterACL := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	for _, tc := range []struct {
		name string
		// acls are the relay principal's; nil runs without SASL and
		// ACLs, on a broker that creates no topic.
		acls []kfake.ACL
		txn  bool
		// inPublish: Publish refuses the message itself, before sending.
		inPublish bool
		want      []string
		// heldUp is what HeldUpTopic names.
		heldUp string
		// logged is in the sink's log.
		logged []string
	}{
		{
			name:   "missing topic, no auto-creation",
			want:   []string{`topic "` + topic + `" does not exist`, "UNKNOWN_TOPIC_OR_PARTITION", "kafka-topics.sh --create --topic " + topic, "kafka.topic_creation"},
			heldUp: topic,
		},
		{
			name:   "no WRITE on the topic",
			acls:   []kfake.ACL{topicACL(kmsg.ACLOperationDescribe), clusterACL(kmsg.ACLOperationIdempotentWrite), clusterACL(kmsg.ACLOperationDescribeConfigs), topicACL(kmsg.ACLOperationDescribeConfigs)},
			want:   []string{`writes to topic "` + topic + `"`, "TOPIC_AUTHORIZATION_FAILED", "WRITE and DESCRIBE on the topic", "--topic " + topic},
			heldUp: topic,
		},
		{
			name:   "no DESCRIBE on the topic",
			acls:   []kfake.ACL{clusterACL(kmsg.ACLOperationIdempotentWrite), clusterACL(kmsg.ACLOperationDescribeConfigs)},
			want:   []string{`writes to topic "` + topic + `"`, "TOPIC_AUTHORIZATION_FAILED", "WRITE and DESCRIBE on the topic"},
			heldUp: topic,
		},
		{
			name:      "no DescribeConfigs on the cluster",
			acls:      []kfake.ACL{topicACL(kmsg.ACLOperationWrite), clusterACL(kmsg.ACLOperationIdempotentWrite)},
			inPublish: true,
			want:      []string{"describe broker", "CLUSTER_AUTHORIZATION_FAILED", "DescribeConfigs on the cluster", "kafka.max_record_bytes"},
			heldUp:    "",
		},
		{
			name:      "no DescribeConfigs on the topic, with transactions",
			acls:      []kfake.ACL{topicACL(kmsg.ACLOperationWrite), clusterACL(kmsg.ACLOperationDescribeConfigs), {Resource: kmsg.ACLResourceTypeTransactionalId, Name: "relay-0", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true}},
			txn:       true,
			inPublish: true,
			want:      []string{`of topic "` + topic + `"`, "TOPIC_AUTHORIZATION_FAILED", "DescribeConfigs on the topic", "kafka.max_record_bytes"},
			heldUp:    topic,
		},
		{
			name:   "no DescribeConfigs on the topic: published under the broker's limit, and said",
			acls:   []kfake.ACL{topicACL(kmsg.ACLOperationWrite), clusterACL(kmsg.ACLOperationIdempotentWrite), clusterACL(kmsg.ACLOperationDescribeConfigs)},
			logged: []string{"cannot read the record size limit of topics", "DescribeConfigs on the topic", topic},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sink.Config{}
			if tc.acls == nil {
				c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				cfg.Brokers = c.ListenAddrs()
			} else {
				_, cfg.Brokers = testenv.Kafka(t, kfake.EnableSASL(), kfake.EnableACLs(),
					kfake.Superuser("PLAIN", "admin", testPassword),
					kfake.User("PLAIN", "relay", testPassword, tc.acls...))
				cfg.AllowPlaintextSASL = true
				cfg.SASL = sink.SASL{Mechanism: "plain", Username: "relay", Password: testPassword}
			}
			if tc.txn {
				cfg.TransactionalID = "relay-0"
			}
			var logs lockedBuffer
			snk, err := sink.New(cfg, sink.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				sink.WithClientOptions(kgo.UnknownTopicRetries(1), kgo.MetadataMinAge(50*time.Millisecond)))
			if err != nil {
				t.Fatal(err)
			}
			defer snk.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res := make(chan error, 1)
			m := &connector.Message{Topic: topic, Key: []byte("a"), Value: []byte(`{}`), EventID: "e1"}
			err = snk.Publish(ctx, m, func(err error) { res <- err })
			if err == nil && !tc.inPublish {
				err = <-res
			}
			if tc.logged != nil {
				if err != nil {
					t.Fatalf("publish: %v; want it published under the broker's limit", err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for !allIn(logs.String(), tc.logged) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if !allIn(logs.String(), tc.logged) {
					t.Fatalf("the sink logged %q; want it to say %q", logs.String(), tc.logged)
				}
				return
			}
			if err == nil || !allIn(err.Error(), tc.want) {
				t.Fatalf("err = %v; want it to say %q", err, tc.want)
			}
			var held interface{ HeldUpTopic() string }
			if !errors.As(err, &held) || held.HeldUpTopic() != tc.heldUp {
				t.Fatalf("err %v holds up %v; want %q", err, held, tc.heldUp)
			}
			var ee *connector.EventError
			if errors.As(err, &ee) || connector.IsPermanent(err) {
				t.Errorf("err %v is the event's own or permanent; want one a restart retries", err)
			}
		})
	}
}

func allIn(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
