package check_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestTopicCreationReported: with kafka.topic_creation on, check passes a
// broker that does not create topics, and says which topics the relay
// will create and with what; the existing one is not among them.
func TestTopicCreationReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSetup(ctx, t, testenv.Postgres(t))
	_, s.brokers = testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"auto.create.topics.enable": "false"}), kfake.SeedTopics(1, "outbox.event.order"))
	s.exec(ctx, t, `INSERT INTO outbox (aggregatetype, aggregateid, type) VALUES ('order', 'o', 't'), ('invoice', 'i', 't'), ('payment', 'p', 't')`)
	s.yaml["kafka"] = "kafka:\n  brokers: [" + strings.Join(s.brokers, ", ") + "]\n  topic_creation:\n    enabled: true\n    partitions: 6\n    replication_factor: 1\n" +
		"    groups:\n      - name: money\n        include: ['outbox\\.event\\.pay.*']\n        configs: {cleanup.policy: compact}\n"
	cfg, _ := s.config(t)
	r, _ := run(ctx, t, cfg)
	expect(t, r, check.CheckKafkaTopics, check.Pass, "kafka.topic_creation will create",
		"outbox.event.invoice (6 partitions, replication factor 1)",
		"outbox.event.payment (6 partitions, replication factor 1, cleanup.policy=compact, group money)")
	if res, _ := r.Find(check.CheckKafkaTopics); strings.Contains(res.Detail, "outbox.event.order") {
		t.Error("an existing topic is reported as to be created")
	}
}

// TestCleanupNeedsDelete: with cdc.cleanup on, a role without DELETE on
// the table fails the grants check, saying what to grant; with it, the
// check passes and says why DELETE is there.
func TestCleanupNeedsDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSetup(ctx, t, testenv.Postgres(t))
	s.yaml["cdc"] = "cdc:\n  create_publication: false\n  cleanup:\n    enabled: true\n"
	cfg, _ := s.config(t)
	r, _ := run(ctx, t, cfg)
	expect(t, r, check.CheckTableGrants, check.Fail, "lacks DELETE", "cdc.cleanup", "GRANT DELETE ON TABLE")
	s.exec(ctx, t, "GRANT DELETE ON outbox TO "+s.role)
	r, _ = run(ctx, t, cfg)
	expect(t, r, check.CheckTableGrants, check.Pass, "DELETE for cdc.cleanup")
}
