package check

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/sink"
)

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
			checkBrokers(ctx, r, cfg, sc, o, pg, kadm.NewClient(cl))
			return
		}
	}
	r.add(Fail, CheckKafka, "the Kafka settings are not usable: "+err.Error(), "fix the kafka section of the configuration")
	skipAll(r, []string{CheckKafkaTLS, CheckKafkaSASL, CheckKafkaTopics})
	if cfg.Source == "cdc" {
		skipAll(r, []string{CheckCheckpoint})
	}
}

func checkBrokers(ctx context.Context, r *Report, cfg *config.Config, sc sink.Config, o options, pg pgFacts, adm *kadm.Client) {
	tlsOn, saslOn := sc.TLS.Enabled, sc.SASL.Mechanism != ""
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	md, err := adm.BrokerMetadata(cctx)
	if err == nil && len(md.Brokers) == 0 {
		err = errors.New("the metadata lists no brokers")
	}
	if err != nil {
		p := sink.DiagnoseConnError(sc, err)
		fix := p.Hint
		if fix == "" {
			fix = fmt.Sprintf("check kafka.brokers (host:port of the listener this client may use) and that they are reachable from here within %s; for a TLS or SASL listener set kafka.tls and kafka.sasl", o.timeout)
		}
		r.add(Fail, CheckKafka, fmt.Sprintf("cannot reach the brokers %s: %v", strings.Join(sc.Brokers, ", "), err), fix)
		for _, part := range []struct {
			check, area string
			on          bool
		}{{CheckKafkaTLS, sink.AreaTLS, tlsOn}, {CheckKafkaSASL, sink.AreaSASL, saslOn}} {
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
		r.skip(CheckKafkaTopics, "not checked: no connection")
		if cfg.Source == "cdc" {
			r.skip(CheckCheckpoint, "not checked: no connection")
		}
		return
	}
	cluster := md.Cluster
	if cluster == "" {
		cluster = "(no id)"
	}
	r.pass(CheckKafka, "reached %d broker(s) of cluster %s through %s", len(md.Brokers), cluster, strings.Join(sc.Brokers, ", "))

	switch {
	case !tlsOn:
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
	switch {
	case !saslOn:
		r.skip(CheckKafkaSASL, "not configured")
	case !tlsOn && strings.EqualFold(sc.SASL.Mechanism, "plain"):
		r.add(Warn, CheckKafkaSASL, fmt.Sprintf("authenticated (%s), but the password crosses the network in the clear (kafka.allow_plaintext_sasl)", sc.SASL),
			"enable kafka.tls, or use scram-sha-256 or scram-sha-512")
	default:
		r.pass(CheckKafkaSASL, "authenticated (%s)", sc.SASL)
	}
	checkTopics(cctx, r, cfg, adm, md, pg)
	checkCheckpoint(ctx, r, cfg, sc, o) // checkpoint.go
}

// checkTopics checks that the topics the outbox needs exist, or that the
// brokers create them on first use.
func checkTopics(ctx context.Context, r *Report, cfg *config.Config, adm *kadm.Client, md kadm.Metadata, pg pgFacts) {
	rc := cfg.RunnerConfig()
	rc.SetDefaults()
	var need []string
	source := ""
	switch {
	case rc.Routing.Topic != "":
		need, source = append(need, rc.Routing.Topic), "routing.topic"
	case pg.sampled:
		for _, t := range pg.aggregateTypes {
			need = append(need, rc.Routing.TopicPrefix+t)
		}
		source = "the aggregate types now in the outbox table"
	}
	if rc.DeadLetterTopic != "" {
		need = append(need, rc.DeadLetterTopic)
	}

	auto := ""
	if rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID); err == nil {
		for _, res := range rcs {
			for _, c := range res.Configs {
				if c.Key == "auto.create.topics.enable" && c.Value != nil {
					auto = *c.Value
				}
			}
		}
	}

	var missing []string
	if len(need) > 0 {
		details, err := adm.ListTopics(ctx, need...)
		if err != nil {
			r.add(Fail, CheckKafkaTopics, "cannot list topics: "+err.Error(), "the client needs Describe on the topics (ACLs)")
			return
		}
		for _, t := range need {
			if d, ok := details[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				missing = append(missing, t)
			}
		}
	}
	create := func(topics []string) string {
		var cmds []string
		for _, t := range topics {
			cmds = append(cmds, fmt.Sprintf("kafka-topics.sh --bootstrap-server %s --create --topic %s", md.Brokers[0].Host, shellQuote(t)))
		}
		return "create them: " + strings.Join(cmds, "; ")
	}
	shown := func(ts []string) string {
		if len(ts) > 10 {
			return strings.Join(ts[:10], ", ") + fmt.Sprintf(" and %d more", len(ts)-10)
		}
		return strings.Join(ts, ", ")
	}
	if tc := cfg.Kafka.TopicCreation; tc.Enabled {
		// The relay creates what is missing before its first record.
		var plans []string
		for _, t := range missing {
			s, group := tc.Settings(t)
			plan := t + " (" + s.String()
			if group != "" {
				plan += ", group " + group
			}
			plans = append(plans, plan+")")
		}
		switch {
		case len(missing) > 0:
			r.pass(CheckKafkaTopics, "kafka.topic_creation will create, before their first records: %s", shown(plans))
		case len(need) == 0:
			r.pass(CheckKafkaTopics, "kafka.topic_creation creates each topic before its first record (default: %s); which topics events will need is not known yet", tc.TopicSettings)
		default:
			r.pass(CheckKafkaTopics, "every topic needed by %s exists: %s", source, shown(need))
		}
		return
	}
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
		if !pg.sampled {
			unknown = ", and the outbox table could not be read, so which topics events need is not known"
		}
		r.add(Warn, CheckKafkaTopics, why+unknown,
			fmt.Sprintf("create a topic %s<aggregatetype> for each aggregate type before its first event, or send every event to one topic (routing.topic)", rc.Routing.TopicPrefix))
	case len(missing) == 0:
		r.pass(CheckKafkaTopics, "every topic needed by %s exists: %s", source, shown(need))
	case auto == "false":
		r.add(Fail, CheckKafkaTopics, fmt.Sprintf("missing topics %s, and the brokers do not create topics (auto.create.topics.enable=false)", shown(missing)),
			create(missing))
	default:
		r.add(Warn, CheckKafkaTopics, fmt.Sprintf("missing topics %s; the brokers do not say whether they create topics on first use", shown(missing)),
			create(missing)+", or make sure auto.create.topics.enable is true")
	}
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
