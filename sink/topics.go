package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicCreation is kafka.topic_creation: the relay creates each topic it
// is about to write its first record to, with the partitions,
// replication factor and configs of the first group whose patterns the
// topic matches, or the section's own, as Kafka Connect's topic.creation.*
// does for a source connector (KIP-158). Most production clusters run
// with auto.create.topics.enable=false, and aggregate types, which name
// the topics, are data: without it the first event of a new aggregate
// type fails until someone creates its topic.
type TopicCreation struct {
	// Enabled turns topic creation on. Default false: topics are left to
	// the brokers (auto.create.topics.enable) or to the operator.
	Enabled bool `yaml:"enabled" doc:"Create each topic before its first record, with the settings below (Kafka Connect's topic.creation.*); a topic that exists is left as it is. The relay's client then needs Create on the topics (or the cluster)." default:"false"`
	// TopicSettings are those of a topic no group matches.
	TopicSettings `yaml:",inline"`
	// Groups are settings for the topics matching their patterns, tried
	// in order; the first that matches wins.
	Groups []TopicGroup `yaml:"groups" doc:"Settings for some topics: a list of {name, include, exclude, partitions, replication_factor, configs}; include and exclude are regular expressions (RE2) matched against the whole topic name; the first group whose include matches and exclude does not gives the topic its settings, each one it does not set taken from kafka.topic_creation's own, configs merged over them. File only." default:"(none)"`
}

// TopicSettings are what a created topic gets.
type TopicSettings struct {
	// Partitions is the new topic's partition count; 0 or -1: the
	// broker's num.partitions.
	Partitions int `yaml:"partitions" doc:"Partitions of a topic the relay creates; 0 or -1 leaves it to the broker's num.partitions." default:"0 (the broker's)"`
	// ReplicationFactor is its replication factor; 0 or -1: the broker's
	// default.replication.factor.
	ReplicationFactor int `yaml:"replication_factor" doc:"Replication factor of a topic the relay creates; 0 or -1 leaves it to the broker's default.replication.factor." default:"0 (the broker's)"`
	// Configs are topic configs (cleanup.policy, retention.ms, ...).
	Configs map[string]string `yaml:"configs" doc:"Topic configs of a topic the relay creates, e.g. {cleanup.policy: compact, retention.ms: \"604800000\"}. File only." default:"(none)"`
}

// TopicGroup is one group of kafka.topic_creation.groups.
type TopicGroup struct {
	Name          string   `yaml:"name"`
	Include       []string `yaml:"include"`
	Exclude       []string `yaml:"exclude"`
	TopicSettings `yaml:",inline"`
}

// Validate reports every problem with c at once.
func (c *TopicCreation) Validate() error {
	var errs []error
	check := func(key string, s TopicSettings) {
		if s.Partitions < -1 || s.Partitions > 1<<20 {
			errs = append(errs, fmt.Errorf("%s.partitions: %d is not a partition count; give a positive number, or -1 for the broker's num.partitions", key, s.Partitions))
		}
		if s.ReplicationFactor < -1 || s.ReplicationFactor > 1<<15-1 {
			errs = append(errs, fmt.Errorf("%s.replication_factor: %d is not a replication factor; give a positive number, or -1 for the broker's default.replication.factor", key, s.ReplicationFactor))
		}
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			if strings.TrimSpace(k) == "" {
				errs = append(errs, fmt.Errorf("%s.configs: a config has an empty name", key))
			}
		}
	}
	check("kafka.topic_creation", c.TopicSettings)
	seen := map[string]bool{}
	for i, g := range c.Groups {
		key := fmt.Sprintf("kafka.topic_creation.groups[%d]", i)
		if g.Name != "" {
			key = fmt.Sprintf("kafka.topic_creation.groups[%d] (%s)", i, g.Name)
			if seen[g.Name] {
				errs = append(errs, fmt.Errorf("%s: the name is used twice", key))
			}
			seen[g.Name] = true
		}
		if len(g.Include) == 0 {
			errs = append(errs, fmt.Errorf("%s.include: no pattern; a group applies to the topics its include patterns match", key))
		}
		for _, p := range append(slices.Clone(g.Include), g.Exclude...) {
			if _, err := regexp.Compile(`^(?:` + p + `)$`); err != nil {
				errs = append(errs, fmt.Errorf("%s: pattern `%s` is not a regular expression (RE2 syntax): %w", key, p, err))
			}
		}
		check(key, g.TopicSettings)
	}
	return errors.Join(errs...)
}

// Settings returns what topic gets when the relay creates it, and the
// name of the group that gave them ("" for the section's own). c must be
// valid.
func (c *TopicCreation) Settings(topic string) (TopicSettings, string) {
	for _, g := range c.Groups {
		if matchAny(g.Include, topic) && !matchAny(g.Exclude, topic) {
			s := c.TopicSettings
			if g.Partitions != 0 {
				s.Partitions = g.Partitions
			}
			if g.ReplicationFactor != 0 {
				s.ReplicationFactor = g.ReplicationFactor
			}
			if len(g.Configs) > 0 {
				s.Configs = maps.Clone(c.Configs)
				if s.Configs == nil {
					s.Configs = map[string]string{}
				}
				maps.Copy(s.Configs, g.Configs)
			}
			return s, g.Name
		}
	}
	return c.TopicSettings, ""
}

func matchAny(patterns []string, topic string) bool {
	for _, p := range patterns {
		if re, err := regexp.Compile(`^(?:` + p + `)$`); err == nil && re.MatchString(topic) {
			return true
		}
	}
	return false
}

// String says what a topic gets, for logs and `check`.
func (s TopicSettings) String() string {
	part, rf := "the broker's partitions", "the broker's replication factor"
	if s.Partitions > 0 {
		part = fmt.Sprintf("%d partitions", s.Partitions)
	}
	if s.ReplicationFactor > 0 {
		rf = fmt.Sprintf("replication factor %d", s.ReplicationFactor)
	}
	out := part + ", " + rf
	if len(s.Configs) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			kv = append(kv, k+"="+s.Configs[k])
		}
		out += ", " + strings.Join(kv, ", ")
	}
	return out
}

// creator creates topics before their first record. It is used from the
// publishing goroutine only; the known set is bounded, and a topic
// forgotten past the bound is only created again, which the broker
// answers with TOPIC_ALREADY_EXISTS.
type creator struct {
	cfg   TopicCreation
	mu    sync.Mutex
	known map[string]struct{}
	// refused are the topics whose creation the broker refused lately,
	// with its refusal, so that each event of such a topic fails at once
	// rather than after a request of its own. Bounded as known is.
	refused map[string]refusal
	now     func() time.Time
}

type refusal struct {
	err *TopicRefusedError
	at  time.Time
}

// maxKnownTopics bounds the topics the creator remembers as existing, and
// those it remembers as refused.
const maxKnownTopics = 10000

// refusedFor is how long a refusal stands before the creator asks the
// broker again: the settings do not change while the relay runs, but the
// cluster may (a broker added, a policy changed).
const refusedFor = time.Minute

// TopicRefusedError is the broker's refusal to create a topic with the
// settings kafka.topic_creation gives it (a replication factor above the
// brokers, a config it does not take, a creation policy). Every event
// routed to the topic fails with it: the sink returns it as that event's
// [*connector.EventError], so that the event goes to the dead letter topic
// or stops the relay naming the topic and the setting, and the events of
// other topics go on.
type TopicRefusedError struct {
	Topic    string
	Settings TopicSettings
	// Key is the setting the broker refused, as the configuration names
	// it (kafka.topic_creation.replication_factor, or a group's).
	Key string
	Err error
}

func (e *TopicRefusedError) Error() string {
	return fmt.Sprintf("the broker refuses to create topic %q with %s: %v; correct %s, or create the topic yourself", e.Topic, e.Settings, e.Err, e.Key)
}

func (e *TopicRefusedError) Unwrap() error { return e.Err }

// ensure creates topic unless it is known to exist: once per topic,
// before its first record. A topic another client created meanwhile is
// fine; a refusal of the settings is a [*TopicRefusedError]; anything else
// is an error saying what to do.
func (c *creator) ensure(ctx context.Context, cl *kgo.Client, topic string) error {
	c.mu.Lock()
	_, ok := c.known[topic]
	r, refused := c.refused[topic]
	c.mu.Unlock()
	switch {
	case ok:
		return nil
	case refused && c.now().Sub(r.at) < refusedFor:
		return r.err
	}
	s, group := c.cfg.Settings(topic)
	configs := make(map[string]*string, len(s.Configs))
	for k, v := range s.Configs {
		configs[k] = &v
	}
	part, rf := int32(s.Partitions), int16(s.ReplicationFactor)
	if part == 0 {
		part = -1
	}
	if rf == 0 {
		rf = -1
	}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, part, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("create topic %q (kafka.topic_creation): %w; grant the relay's principal Create on the topic (or the cluster), or create the topic yourself", topic, err)
	case errors.Is(err, kerr.InvalidReplicationFactor), errors.Is(err, kerr.InvalidPartitions), errors.Is(err, kerr.InvalidConfig), errors.Is(err, kerr.PolicyViolation):
		refusedErr := &TopicRefusedError{Topic: topic, Settings: s, Key: c.cfg.refusedKey(group, err), Err: err}
		remember(c, c.refused, topic, refusal{refusedErr, c.now()})
		return refusedErr
	default:
		return fmt.Errorf("create topic %q (kafka.topic_creation): %w", topic, err)
	}
	remember(c, c.known, topic, struct{}{})
	c.mu.Lock()
	delete(c.refused, topic)
	c.mu.Unlock()
	return nil
}

// remember puts topic in m, one of the creator's bounded sets.
func remember[V any](c *creator, m map[string]V, topic string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(m) >= maxKnownTopics {
		clear(m)
	}
	m[topic] = v
}

// refusedKey names the setting behind the broker's refusal err of a topic
// whose settings group gave ("" for the section's own): the group's own
// key when the group set it, else the section's. A creation policy may
// refuse any of them, so it names the whole section or group.
func (c *TopicCreation) refusedKey(group string, err error) string {
	var g *TopicGroup
	for i := range c.Groups {
		if group != "" && c.Groups[i].Name == group {
			g = &c.Groups[i]
		}
	}
	section := "kafka.topic_creation"
	if g != nil {
		section = fmt.Sprintf("kafka.topic_creation.groups (%s)", group)
	}
	var field string
	var set bool // the group set it
	switch {
	case errors.Is(err, kerr.InvalidReplicationFactor):
		field, set = "replication_factor", g != nil && g.ReplicationFactor != 0
	case errors.Is(err, kerr.InvalidPartitions):
		field, set = "partitions", g != nil && g.Partitions != 0
	case errors.Is(err, kerr.InvalidConfig):
		field, set = "configs", g != nil && len(g.Configs) > 0
	default:
		return section
	}
	if set {
		return section + "." + field
	}
	return "kafka.topic_creation." + field
}
