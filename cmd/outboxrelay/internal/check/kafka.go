package check

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/sink"
)

// The Kafka side of the report, in steps: the connection with its TLS and
// SASL (checkBrokers), the topics the outbox needs (checkTopics), the
// record size limits (checkLimits), what the relay's principal may do
// (checkPermissions, kafkaperms.go), the CDC relay's checkpoint topic
// (checkCheckpointTopic, kafkaperms.go) and what it holds (checkCheckpoint,
// checkpoint.go). None writes a record or creates a topic.

// The Kafka checks besides the connection's (postgres.go).
const (
	// CheckKafkaLimits compares the brokers' record size limits with
	// kafka.max_record_bytes, or says the relay cannot read them.
	CheckKafkaLimits = "kafka limits"
	// CheckKafkaPermissions is what the relay's principal may do on the
	// topics and the cluster, as the brokers report it (KIP-430).
	CheckKafkaPermissions = "kafka permissions"
	// CheckCheckpointTopic is the CDC relay's checkpoint topic: there or
	// creatable, compacted, and the principal's rights on it.
	CheckCheckpointTopic = "kafka checkpoint topic"
)

// kafkaChecks are the lines after the connection's, skipped together when
// there is no connection.
func kafkaChecks(cfg *config.Config) []string {
	names := []string{CheckKafkaTopics, CheckKafkaLimits, CheckKafkaPermissions}
	if cfg.Source == "cdc" {
		names = append(names, CheckCheckpointTopic, CheckCheckpoint)
	}
	return names
}

func checkKafka(ctx context.Context, r *Report, cfg *config.Config, o options, pg pgFacts) {
	sc := cfg.SinkConfig()
	sc.SetDefaults()
	opts, err := sink.ClientOptions(sc)
	if err == nil {
		var cl *kgo.Client
		// No producer options: check creates no topic and writes nothing.
		cl, err = kgo.NewClient(append(opts, kgo.DialTimeout(o.timeout), kgo.RetryTimeout(o.timeout))...)
		if err == nil {
			defer cl.Close()
			checkBrokers(ctx, r, cfg, sc, o, pg, cl)
			return
		}
	}
	r.add(Fail, CheckKafka, "the Kafka settings are not usable: "+err.Error(), "fix the kafka section of the configuration")
	skipAll(r, append([]string{CheckKafkaTLS, CheckKafkaSASL}, kafkaChecks(cfg)...))
}

func checkBrokers(ctx context.Context, r *Report, cfg *config.Config, sc sink.Config, o options, pg pgFacts, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	md, err := adm.BrokerMetadata(cctx)
	if err == nil && len(md.Brokers) == 0 {
		err = errors.New("the metadata lists no brokers")
	}
	if err != nil {
		unreachableBrokers(r, cfg, sc, o, err)
		return
	}
	cluster := md.Cluster
	if cluster == "" {
		cluster = "(no id)"
	}
	r.pass(CheckKafka, "reached %d broker(s) of cluster %s through %s", len(md.Brokers), cluster, strings.Join(sc.Brokers, ", "))
	checkTLS(r, sc)
	checkSASL(r, sc)
	need := neededTopics(cfg, pg)
	k := kafkaFacts{cfg: cfg, sc: sc, adm: adm, cl: cl, need: need}
	k.checkTopics(cctx, r, md)
	k.checkLimits(cctx, r)
	k.checkPermissions(cctx, r)
	k.checkCheckpointTopic(cctx, r)
	checkCheckpoint(ctx, r, cfg, sc, o) // checkpoint.go
}

// unreachableBrokers reports brokers that did not answer: the connection
// line, and the TLS and SASL lines with what err says of them.
func unreachableBrokers(r *Report, cfg *config.Config, sc sink.Config, o options, err error) {
	p := sink.DiagnoseConnError(sc, err)
	fix := p.Hint
	if fix == "" {
		fix = fmt.Sprintf("check kafka.brokers (host:port of the listener this client may use) and that they are reachable from here within %s; for a TLS or SASL listener set kafka.tls and kafka.sasl", o.timeout)
	}
	r.add(Fail, CheckKafka, fmt.Sprintf("cannot reach the brokers %s: %v", strings.Join(sc.Brokers, ", "), err), fix)
	for _, part := range []struct {
		check, area string
		on          bool
	}{{CheckKafkaTLS, sink.AreaTLS, sc.TLS.Enabled}, {CheckKafkaSASL, sink.AreaSASL, sc.SASL.Mechanism != ""}} {
		switch {
		case !part.on:
			r.skip(part.check, "not configured")
		case p.Area == part.area && part.area == sink.AreaTLS:
			r.add(Fail, part.check, "the TLS handshake failed", p.Hint)
		case p.Area == part.area:
			r.add(Fail, part.check, "authentication failed", p.Hint)
		case p.Area == sink.AreaSASL && part.area == sink.AreaTLS:
			// SASL comes after TLS, so the handshake worked.
			r.pass(part.check, "the handshake succeeded")
		default:
			r.skip(part.check, "not checked: no connection")
		}
	}
	for _, name := range kafkaChecks(cfg) {
		r.skip(name, "not checked: no connection")
	}
}

func checkTLS(r *Report, sc sink.Config) {
	switch {
	case !sc.TLS.Enabled:
		r.skip(CheckKafkaTLS, "not configured (kafka.tls.enabled is false)")
	case sc.TLS.InsecureSkipVerify:
		r.add(Warn, CheckKafkaTLS, "the handshake succeeded, but the brokers' certificates are not verified (kafka.tls.insecure_skip_verify)",
			"set kafka.tls.ca_file to the CA that signs them and drop insecure_skip_verify")
	default:
		roots := "the system's roots"
		if sc.TLS.CAFile != "" {
			roots = sc.TLS.CAFile
		}
		client := ""
		if sc.TLS.CertFile != "" {
			client = "; the client certificate was accepted"
		}
		r.pass(CheckKafkaTLS, "the handshake succeeded; the brokers' certificates verify against %s%s", roots, client)
	}
}

func checkSASL(r *Report, sc sink.Config) {
	switch {
	case sc.SASL.Mechanism == "":
		r.skip(CheckKafkaSASL, "not configured")
	case !sc.TLS.Enabled && strings.EqualFold(sc.SASL.Mechanism, "plain"):
		r.add(Warn, CheckKafkaSASL, fmt.Sprintf("authenticated (%s), but the password crosses the network in the clear (kafka.allow_plaintext_sasl)", sc.SASL),
			"enable kafka.tls, or use scram-sha-256 or scram-sha-512")
	default:
		r.pass(CheckKafkaSASL, "authenticated (%s)", sc.SASL)
	}
}

// topicNeeds are the topics the relay will write, as far as check can
// tell: routing.topic, or a topic per aggregate type now in the outbox
// table, and the dead letter topic.
type topicNeeds struct {
	events     []string
	deadLetter string
	// source says where events came from; empty when it is not known
	// which topics events will need.
	source string
	prefix string
	// sampled: the outbox table could be read.
	sampled bool
}

// all is every topic needed: the events' and the dead letter topic.
func (n topicNeeds) all() []string {
	if n.deadLetter == "" {
		return n.events
	}
	return append(slices.Clip(n.events), n.deadLetter)
}

func neededTopics(cfg *config.Config, pg pgFacts) topicNeeds {
	rc := cfg.RunnerConfig()
	rc.SetDefaults()
	n := topicNeeds{deadLetter: rc.DeadLetterTopic, prefix: rc.Routing.TopicPrefix, sampled: pg.sampled}
	switch {
	case rc.Routing.Topic != "":
		n.events, n.source = []string{rc.Routing.Topic}, "routing.topic"
	case pg.sampled:
		for _, t := range pg.aggregateTypes {
			n.events = append(n.events, rc.Routing.TopicPrefix+t)
		}
		n.source = "the aggregate types now in the outbox table"
	}
	return n
}

// kafkaFacts is what the steps after the connection share.
type kafkaFacts struct {
	cfg  *config.Config
	sc   sink.Config
	adm  *kadm.Client
	cl   *kgo.Client
	need topicNeeds
	// missing are the needed topics that do not exist (checkTopics).
	missing []string
	// existing are those that do.
	existing []string
}

// checkTopics checks that the topics the outbox needs exist, or that the
// relay or the brokers create them on first use.
func (k *kafkaFacts) checkTopics(ctx context.Context, r *Report, md kadm.Metadata) {
	auto := brokerConfig(ctx, k.adm, md.Brokers[0].NodeID, "auto.create.topics.enable")
	need := k.need.all()
	if len(need) > 0 {
		details, err := k.adm.ListTopics(ctx, need...)
		if err != nil {
			r.add(Fail, CheckKafkaTopics, "cannot list topics: "+err.Error(), "the client needs Describe on the topics (ACLs)")
			return
		}
		for _, t := range need {
			if d, ok := details[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				k.missing = append(k.missing, t)
			} else {
				k.existing = append(k.existing, t)
			}
		}
	}
	if tc := k.cfg.Kafka.TopicCreation; tc.Enabled {
		k.reportCreation(r, tc)
		return
	}
	k.reportAutoCreation(r, auto)
}

// reportCreation is the topics line with kafka.topic_creation, which
// creates what is missing before its first record.
func (k *kafkaFacts) reportCreation(r *Report, tc sink.TopicCreation) {
	var plans []string
	for _, t := range k.missing {
		s, group := tc.Settings(t)
		plan := t + " (" + s.String()
		if group != "" {
			plan += ", group " + group
		}
		plans = append(plans, plan+")")
	}
	switch {
	case len(k.missing) > 0:
		r.pass(CheckKafkaTopics, "kafka.topic_creation will create, before their first records: %s", shown(plans))
	case len(k.need.all()) == 0:
		r.pass(CheckKafkaTopics, "kafka.topic_creation creates each topic before its first record (default: %s); which topics events will need is not known yet", tc.TopicSettings)
	default:
		r.pass(CheckKafkaTopics, "every topic needed by %s exists: %s", k.need.source, shown(k.need.all()))
	}
}

// reportAutoCreation is the topics line without kafka.topic_creation:
// auto is the brokers' auto.create.topics.enable, "" when they do not say.
func (k *kafkaFacts) reportAutoCreation(r *Report, auto string) {
	need, missing := k.need.all(), k.missing
	switch {
	case auto == "true":
		detail := "the brokers create topics on first use (auto.create.topics.enable=true)"
		if len(missing) > 0 {
			detail += fmt.Sprintf("; not there yet: %s", shown(missing))
		}
		r.pass(CheckKafkaTopics, "%s", detail)
	case len(need) == 0:
		why := "the brokers do not say whether they create topics on first use"
		if auto == "false" {
			why = "auto.create.topics.enable is false"
		}
		unknown := ", and the outbox table is empty, so which topics events will need is not known yet"
		if !k.need.sampled {
			unknown = ", and the outbox table could not be read, so which topics events need is not known"
		}
		r.add(Warn, CheckKafkaTopics, why+unknown,
			fmt.Sprintf("create a topic %s<aggregatetype> for each aggregate type before its first event (%s), or send every event to one topic (routing.topic), or set kafka.topic_creation",
				k.need.prefix, k.createCommand(k.need.prefix+"<aggregatetype>")))
	case len(missing) == 0:
		r.pass(CheckKafkaTopics, "every topic needed by %s exists: %s", k.need.source, shown(need))
	case auto == "false":
		r.add(Fail, CheckKafkaTopics, fmt.Sprintf("missing topics %s, and the brokers do not create topics (auto.create.topics.enable=false)", shown(missing)),
			k.createAll(missing)+", or set kafka.topic_creation")
	default:
		r.add(Warn, CheckKafkaTopics, fmt.Sprintf("missing topics %s; the brokers do not say whether they create topics on first use", shown(missing)),
			k.createAll(missing)+", or set kafka.topic_creation, or make sure auto.create.topics.enable is true")
	}
}

// createCommand is the kafka-topics.sh line that creates topic, through
// the brokers the relay is configured with.
func (k *kafkaFacts) createCommand(topic string) string {
	return fmt.Sprintf("kafka-topics.sh --bootstrap-server %s --create --topic %s", strings.Join(k.sc.Brokers, ","), shellQuote(topic))
}

func (k *kafkaFacts) createAll(topics []string) string {
	var cmds []string
	for _, t := range topics {
		cmds = append(cmds, k.createCommand(t))
	}
	return "create them: " + strings.Join(cmds, "; ")
}

func shown(ts []string) string {
	if len(ts) > 10 {
		return strings.Join(ts[:10], ", ") + fmt.Sprintf(" and %d more", len(ts)-10)
	}
	return strings.Join(ts, ", ")
}

// brokerConfig is the broker's setting key, "" when it does not say.
func brokerConfig(ctx context.Context, adm *kadm.Client, node int32, key string) string {
	rcs, err := adm.DescribeBrokerConfigs(ctx, node)
	if err != nil {
		return ""
	}
	for _, res := range rcs {
		for _, c := range res.Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value
			}
		}
	}
	return ""
}

// checkLimits reports the record size limits the relay works with: the
// brokers', which it reads unless kafka.max_record_bytes is set, or that
// setting against the topics' own.
func (k *kafkaFacts) checkLimits(ctx context.Context, r *Report) {
	fixed := k.sc.MaxRecordBytes
	broker, byTopic, err := sink.ReadLimits(ctx, k.adm, k.existing)
	var refused *sink.LimitLookupError
	switch {
	case err != nil && fixed > 0:
		r.pass(CheckKafkaLimits, "kafka.max_record_bytes is %d, so the relay reads no limit from the brokers; check could not read them to compare (%v)", fixed, err)
		return
	case errors.As(err, &refused) && len(refused.Topics) == 0:
		r.add(Fail, CheckKafkaLimits, "the relay reads the brokers' message.max.bytes before its first record, and publishes nothing without it: "+refused.Err.Error(),
			"grant the relay's principal DescribeConfigs on the cluster (kafka-acls.sh --add --allow-principal User:<name> --operation DescribeConfigs --cluster), or set kafka.max_record_bytes")
		return
	case errors.As(err, &refused):
		r.add(Warn, CheckKafkaLimits, fmt.Sprintf("the brokers take records of up to %d bytes (message.max.bytes), but the relay may not read the own limits of %s, and checks their records against the brokers' until it can: %v", broker, shown(refused.Topics), refused.Err),
			"grant the relay's principal DescribeConfigs on the topics, or set kafka.max_record_bytes to the smallest max.message.bytes of the topics")
		return
	case err != nil:
		r.add(Warn, CheckKafkaLimits, "cannot read the record size limits: "+err.Error(), "run check again once the brokers answer")
		return
	}
	if fixed == 0 {
		r.pass(CheckKafkaLimits, "the brokers take records of up to %d bytes (message.max.bytes)%s; the relay checks each record against its topic's limit", broker, topicLimits(byTopic, broker))
		return
	}
	var below []string
	if broker < fixed {
		below = append(below, fmt.Sprintf("the brokers (message.max.bytes %d, for topics without their own)", broker))
	}
	for _, t := range slices.Sorted(maps.Keys(byTopic)) {
		if v := byTopic[t]; v < fixed && v != broker {
			below = append(below, fmt.Sprintf("topic %s (max.message.bytes %d)", t, v))
		}
	}
	if len(below) == 0 {
		r.pass(CheckKafkaLimits, "kafka.max_record_bytes (%d) is within what the brokers (%d) and the topics needed take%s", fixed, broker, topicLimits(byTopic, broker))
		return
	}
	r.add(Warn, CheckKafkaLimits, fmt.Sprintf("kafka.max_record_bytes is %d, larger than the limit of %s: a record between the two passes the relay's check, is refused by the broker, and fails alone as too large (the dead letter topic, or a stop naming it)", fixed, strings.Join(below, ", ")),
		"set kafka.max_record_bytes to the smallest of those limits, or unset it to have the relay read them")
}

// topicLimits lists the topics' limits that differ from the broker's.
func topicLimits(byTopic map[string]int, broker int) string {
	var own []string
	for _, t := range slices.Sorted(maps.Keys(byTopic)) {
		if byTopic[t] != broker {
			own = append(own, fmt.Sprintf("%s %d", t, byTopic[t]))
		}
	}
	if len(own) == 0 {
		return ""
	}
	return "; topics with their own max.message.bytes: " + strings.Join(own, ", ")
}

// shellQuote quotes a topic name for the command line; Kafka's legal
// topic characters need no quoting, but the name may not be legal.
func shellQuote(s string) string {
	const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	if s != "" && strings.Trim(s, safe) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
