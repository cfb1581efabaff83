package check_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// aclBrokers starts kfake with ACLs, a superuser and the principal
// User:relay granted acls, and points s's configuration at it as relay.
func aclBrokers(t *testing.T, s *setup, opts []kfake.Opt, acls ...kfake.ACL) {
	t.Helper()
	_, s.brokers = testenv.Kafka(t, append([]kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", saslPassword), kfake.User("PLAIN", "relay", saslPassword, acls...)}, opts...)...)
	s.yaml["kafka"] = fmt.Sprintf("kafka:\n  brokers: [%s]\n  allow_plaintext_sasl: true\n  sasl: {mechanism: plain, username: relay, password: %s}\n",
		strings.Join(s.brokers, ", "), saslPassword)
}

// createTopic creates topic on brokers with configs.
func createTopic(ctx context.Context, t *testing.T, brokers []string, topic string, configs map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, cfg, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func allow(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// TestKafkaSideReported: what check finds on the Kafka side beyond the
// connection, each named with its fix: the port in the command that
// creates a missing topic; a topic taking less than kafka.max_record_bytes;
// a principal that may not read the brokers' limit, or write a topic the
// outbox needs; the checkpoint topic missing and not creatable, or not
// compacted. Every one is read with the relay's own rights (no
// DescribeAcls), and nothing is written.
func TestKafkaSideReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "outbox.event.order"
	withOrder := func(t *testing.T) *setup {
		s := newSetup(ctx, t, testenv.Postgres(t))
		s.exec(ctx, t, `INSERT INTO outbox (aggregatetype, aggregateid, type) VALUES ('order', 'o', 't')`)
		return s
	}
	t.Run("the create command names the port", func(t *testing.T) {
		s := withOrder(t)
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafkaTopics, check.Warn, "kafka-topics.sh --bootstrap-server "+s.brokers[0]+" --create --topic "+topic)
	})
	t.Run("a topic below kafka.max_record_bytes", func(t *testing.T) {
		s := withOrder(t)
		_, s.brokers = testenv.Kafka(t)
		createTopic(ctx, t, s.brokers, topic, map[string]string{"max.message.bytes": "4096"})
		s.yaml["kafka"] = fmt.Sprintf("kafka:\n  brokers: [%s]\n  max_record_bytes: 100000\n", strings.Join(s.brokers, ", "))
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafkaLimits, check.Warn, "kafka.max_record_bytes is 100000", "topic "+topic+" (max.message.bytes 4096)", "set kafka.max_record_bytes to the smallest")
		onlyFailures(t, r)
	})
	t.Run("the topics' own limits read", func(t *testing.T) {
		s := withOrder(t)
		_, s.brokers = testenv.Kafka(t)
		createTopic(ctx, t, s.brokers, topic, map[string]string{"max.message.bytes": "4096"})
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafkaLimits, check.Pass, "up to 1048588 bytes (message.max.bytes)", topic+" 4096")
		expect(t, r, check.CheckKafkaPermissions, check.Pass, "may write "+topic)
	})
	t.Run("no DescribeConfigs on the cluster", func(t *testing.T) {
		s := withOrder(t)
		aclBrokers(t, s, []kfake.Opt{kfake.SeedTopics(1, topic)}, allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationWrite))
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafkaLimits, check.Fail, "publishes nothing without it", "CLUSTER_AUTHORIZATION_FAILED", "DescribeConfigs", "--cluster", "kafka.max_record_bytes")
	})
	t.Run("no WRITE on a topic the outbox needs", func(t *testing.T) {
		s := withOrder(t)
		aclBrokers(t, s, []kfake.Opt{kfake.SeedTopics(1, topic)},
			allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationDescribe), allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribeConfigs))
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckKafkaPermissions, check.Fail, "lacks WRITE on topic "+topic,
			"kafka-acls.sh --bootstrap-server "+s.brokers[0]+" --add --allow-principal User:relay --operation Write --operation Describe --topic "+topic)
	})
	t.Run("checkpoint topic not to be described", func(t *testing.T) {
		s := withOrder(t)
		aclBrokers(t, s, []kfake.Opt{kfake.SeedTopics(1, topic)}, allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationWrite),
			allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribeConfigs))
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckCheckpointTopic, check.Fail, "refuse to describe checkpoint topic outboxrelay.checkpoints", "TOPIC_AUTHORIZATION_FAILED",
			"--allow-principal User:relay --operation Read --operation Write --operation Describe --topic outboxrelay.checkpoints")
		expect(t, r, check.CheckKafkaPermissions, check.Pass, "may write "+topic)
	})
	t.Run("checkpoint topic missing, and no CREATE", func(t *testing.T) {
		s := withOrder(t)
		aclBrokers(t, s, []kfake.Opt{kfake.SeedTopics(1, topic)}, allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationWrite),
			allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribeConfigs),
			allow(kmsg.ACLResourceTypeTopic, "outboxrelay.checkpoints", kmsg.ACLOperationDescribe))
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckCheckpointTopic, check.Warn, "outboxrelay.checkpoints does not exist", "lacks CREATE on the cluster",
			"--create --topic outboxrelay.checkpoints --partitions 1 --config cleanup.policy=compact")
	})
	t.Run("checkpoint topic not compacted", func(t *testing.T) {
		s := withOrder(t)
		_, s.brokers = testenv.Kafka(t)
		createTopic(ctx, t, s.brokers, "outboxrelay.checkpoints", map[string]string{"cleanup.policy": "delete"})
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckCheckpointTopic, check.Fail, "cleanup.policy=delete", "retention deletes",
			"kafka-configs.sh --bootstrap-server "+s.brokers[0]+" --alter --entity-type topics --entity-name outboxrelay.checkpoints --add-config cleanup.policy=compact")
	})
	t.Run("checkpoint topic compacted", func(t *testing.T) {
		s := withOrder(t)
		_, s.brokers = testenv.Kafka(t)
		createTopic(ctx, t, s.brokers, "outboxrelay.checkpoints", map[string]string{"cleanup.policy": "compact"})
		cfg, _ := s.config(t)
		r, _ := run(ctx, t, cfg)
		expect(t, r, check.CheckCheckpointTopic, check.Pass, "exists and is compacted", "may read, write and describe it")
	})
}
