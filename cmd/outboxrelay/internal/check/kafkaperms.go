package check

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
)

// What the relay's principal may do, as the brokers report it to a client
// that asks (KIP-430, Kafka 2.3 and later): the authorized operations of
// each topic in a metadata answer, and the cluster's in DescribeCluster's.
// This needs no DescribeAcls, which a relay's principal seldom has, and
// writes nothing. A grant on a topic that does not exist yet (a prefixed
// CREATE, say) is not reported: only the cluster's CREATE is seen.

// topicRights is what the brokers say of one topic.
type topicRights struct {
	exists bool
	// ops are the principal's operations on it; known is false when the
	// brokers did not say (omitted, or an older broker).
	ops   []kadm.ACLOperation
	known bool
	// err is the topic's error in the answer, other than its absence.
	err error
}

func (t topicRights) may(op kadm.ACLOperation) bool { return slices.Contains(t.ops, op) }

// rightsOf asks the brokers for topics and the principal's operations on
// each.
func (k *kafkaFacts) rightsOf(ctx context.Context, topics []string) (map[string]topicRights, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]topicRights, len(topics))
	for _, rt := range resp.Topics {
		if rt.Topic == nil {
			continue
		}
		var tr topicRights
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		case err != nil:
			tr.err = err
		default:
			tr.exists = true
			tr.known = rt.AuthorizedOperations != math.MinInt32
			tr.ops = kadm.DecodeACLOperations(rt.AuthorizedOperations)
		}
		out[*rt.Topic] = tr
	}
	return out, nil
}

// clusterRights is the principal's operations on the cluster; known is
// false when the brokers do not say.
func (k *kafkaFacts) clusterRights(ctx context.Context) (ops []kadm.ACLOperation, known bool) {
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeClusterAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil || resp.ErrorCode != 0 || resp.ClusterAuthorizedOperations == math.MinInt32 {
		return nil, false
	}
	return kadm.DecodeACLOperations(resp.ClusterAuthorizedOperations), true
}

// principal names the relay's principal for a grant.
func (k *kafkaFacts) principal() string {
	if k.sc.SASL.Username != "" {
		return "User:" + k.sc.SASL.Username
	}
	return "User:<the relay's principal>"
}

// grant is the kafka-acls.sh line that allows ops on topic.
func (k *kafkaFacts) grant(topic string, ops ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka-acls.sh --bootstrap-server %s --add --allow-principal %s", strings.Join(k.sc.Brokers, ","), k.principal())
	for _, op := range ops {
		b.WriteString(" --operation " + op)
	}
	b.WriteString(" --topic " + shellQuote(topic))
	return b.String()
}

// checkPermissions reports whether the principal may write the topics the
// outbox needs and, with kafka.topic_creation, create the missing ones.
// The transactional id of exactly_once is not tried: loading a producer
// id for it would fence a running relay.
func (k *kafkaFacts) checkPermissions(ctx context.Context, r *Report) {
	if len(k.existing) == 0 && len(k.missing) == 0 {
		r.skip(CheckKafkaPermissions, "not checked: which topics events will need is not known yet")
		return
	}
	var lacks, fixes, fine []string
	if len(k.existing) > 0 {
		rights, err := k.rightsOf(ctx, k.existing)
		if err != nil {
			r.add(Warn, CheckKafkaPermissions, "cannot ask the brokers for the principal's rights: "+err.Error(), "run check again once the brokers answer")
			return
		}
		told := func(t string) bool { return rights[t].known || rights[t].err != nil }
		if !slices.ContainsFunc(k.existing, told) {
			r.skip(CheckKafkaPermissions, "not checked: the brokers do not report a client's rights on topics (KIP-430, Kafka 2.3 and later)")
			return
		}
		for _, t := range k.existing {
			tr := rights[t]
			switch {
			case tr.err != nil:
				lacks = append(lacks, fmt.Sprintf("topic %s (%v)", t, tr.err))
			case !tr.known:
				continue // the brokers said nothing of this one
			case !tr.may(kadm.OpWrite):
				lacks = append(lacks, fmt.Sprintf("WRITE on topic %s", t))
			default:
				fine = append(fine, t)
				continue
			}
			fixes = append(fixes, k.grant(t, "Write", "Describe"))
		}
	}
	var creates string
	if len(k.missing) > 0 && k.cfg.Kafka.TopicCreation.Enabled {
		ops, known := k.clusterRights(ctx)
		switch {
		case known && !slices.Contains(ops, kadm.OpCreate):
			lacks = append(lacks, fmt.Sprintf("CREATE on the cluster, for kafka.topic_creation to create %s (a grant on those topics, which check cannot see, would do too)", shown(k.missing)))
			fixes = append(fixes, fmt.Sprintf("kafka-acls.sh --bootstrap-server %s --add --allow-principal %s --operation Create --cluster, or create the topics yourself", strings.Join(k.sc.Brokers, ","), k.principal()))
		case known:
			creates = "may create " + shown(k.missing) + " (CREATE on the cluster)"
		}
	}
	if len(lacks) > 0 {
		r.add(Fail, CheckKafkaPermissions, "the relay's principal lacks "+strings.Join(lacks, "; ")+": the brokers refuse its records for those topics, and it restarts until the grant exists",
			"grant it: "+strings.Join(fixes, "; "))
		return
	}
	var may []string
	if len(fine) > 0 {
		may = append(may, "may write "+shown(fine))
	}
	if creates != "" {
		may = append(may, creates)
	}
	if len(may) == 0 {
		r.skip(CheckKafkaPermissions, "not checked: the topics needed are not there yet (see kafka topics)")
		return
	}
	detail := "the brokers say the relay's principal " + strings.Join(may, ", and ")
	if k.cfg.Kafka.Delivery == config.ExactlyOnce {
		detail += "; WRITE on its transactional id is not tried, which would fence a running relay"
	}
	r.pass(CheckKafkaPermissions, "%s", detail)
}

// checkCheckpointTopic reports the CDC relay's checkpoint topic: there and
// compacted, with READ, WRITE and DESCRIBE for the principal; or missing,
// and then whether the relay may create it at start.
func (k *kafkaFacts) checkCheckpointTopic(ctx context.Context, r *Report) {
	if k.cfg.Source != "cdc" {
		return
	}
	topic := k.cfg.Kafka.CheckpointTopic
	rights, err := k.rightsOf(ctx, []string{topic})
	if err != nil {
		r.add(Warn, CheckCheckpointTopic, fmt.Sprintf("cannot ask the brokers for topic %s: %v", topic, err), "run check again once the brokers answer")
		return
	}
	tr := rights[topic]
	create := fmt.Sprintf("kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions 1 --config cleanup.policy=compact", strings.Join(k.sc.Brokers, ","), shellQuote(topic))
	switch {
	case tr.err != nil:
		r.add(Fail, CheckCheckpointTopic, fmt.Sprintf("the brokers refuse to describe checkpoint topic %s: %v; the relay reads it at every start", topic, tr.err),
			"grant the relay's principal READ, WRITE and DESCRIBE on it: "+k.grant(topic, "Read", "Write", "Describe")+"; or set kafka.checkpoint_topic to a topic it may use")
		return
	case !tr.exists:
		k.missingCheckpointTopic(ctx, r, topic, create)
		return
	}
	var lacks []string
	for _, op := range []kadm.ACLOperation{kadm.OpRead, kadm.OpWrite, kadm.OpDescribe} {
		if tr.known && !tr.may(op) {
			lacks = append(lacks, strings.ToUpper(op.String()))
		}
	}
	if len(lacks) > 0 {
		r.add(Fail, CheckCheckpointTopic, fmt.Sprintf("the relay's principal lacks %s on checkpoint topic %s: it reads the topic at every start and writes a checkpoint for every batch Kafka acknowledges", strings.Join(lacks, ", "), topic),
			"grant them: "+k.grant(topic, "Read", "Write", "Describe")+"; or set kafka.checkpoint_topic to a topic it may use")
		return
	}
	policy, err := topicConfig(ctx, k.adm, topic, "cleanup.policy")
	switch {
	case err != nil:
		r.add(Warn, CheckCheckpointTopic, fmt.Sprintf("checkpoint topic %s exists, but its cleanup.policy cannot be read: %v", topic, err),
			"make sure it is compacted (cleanup.policy=compact), or grant the principal DescribeConfigs on it so that check can tell")
	case !slices.Contains(strings.Split(policy, ","), "compact"):
		r.add(Fail, CheckCheckpointTopic, fmt.Sprintf("checkpoint topic %s has cleanup.policy=%s: retention deletes the relay's checkpoint once it is older than retention.ms, and the relay would then take its slot's position on trust, or, if the slot is gone too, start as a first start", topic, policy),
			fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact", strings.Join(k.sc.Brokers, ","), shellQuote(topic)))
	default:
		rights := "the relay's principal may read, write and describe it"
		if !tr.known {
			rights = "the brokers do not report the principal's rights on it"
		}
		r.pass(CheckCheckpointTopic, "checkpoint topic %s exists and is compacted (cleanup.policy=%s); %s", topic, policy, rights)
	}
}

// missingCheckpointTopic reports a checkpoint topic that does not exist
// yet: the relay creates it at start, compacted, if it may.
func (k *kafkaFacts) missingCheckpointTopic(ctx context.Context, r *Report, topic, create string) {
	ops, known := k.clusterRights(ctx)
	switch {
	case known && !slices.Contains(ops, kadm.OpCreate):
		r.add(Warn, CheckCheckpointTopic, fmt.Sprintf("checkpoint topic %s does not exist, and the relay, which creates it at start, lacks CREATE on the cluster (a grant on the topic, which check cannot see, would do too)", topic),
			"create it: "+create+"; and grant the principal READ, WRITE and DESCRIBE on it")
	case known:
		r.pass(CheckCheckpointTopic, "checkpoint topic %s does not exist yet: the relay creates it at start, compacted (it may: CREATE on the cluster)", topic)
	default:
		r.pass(CheckCheckpointTopic, "checkpoint topic %s does not exist yet: the relay creates it at start, compacted, which needs CREATE on the cluster or the topic (the brokers do not say whether it may)", topic)
	}
}

// topicConfig is topic's setting key.
func topicConfig(ctx context.Context, adm *kadm.Client, topic, key string) (string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "", err
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return "", rc.Err
		}
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value, nil
			}
		}
	}
	return "", fmt.Errorf("the brokers do not report %s", key)
}
