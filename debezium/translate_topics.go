package debezium

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// topicCreationPrefix starts Kafka Connect's topic creation options of a
// source connector (KIP-158).
const topicCreationPrefix = "topic.creation."

// topicSettings mirrors kafka.topic_creation's settings, for the YAML.
type topicSettings struct {
	Partitions        int               `yaml:"partitions,omitempty"`
	ReplicationFactor int               `yaml:"replication_factor,omitempty"`
	Configs           map[string]string `yaml:"configs,omitempty"`
}

type topicGroup struct {
	Name          string   `yaml:"name"`
	Include       []string `yaml:"include,flow"`
	Exclude       []string `yaml:"exclude,flow,omitempty"`
	topicSettings `yaml:",inline"`
}

type topicCreation struct {
	Enabled       bool `yaml:"enabled"`
	topicSettings `yaml:",inline"`
	Groups        []topicGroup `yaml:"groups,omitempty"`
}

// topicCreation maps topic.creation.* onto kafka.topic_creation. Kafka
// Connect creates a source connector's topics only when the default
// group has both its partitions and its replication factor (-1 for the
// broker's); other topic.creation.default.* keys are topic configs. Each
// group of topic.creation.groups has include and exclude lists of
// patterns, and may set its own partitions, replication factor and
// configs, taking the rest from the default group; the first group a
// topic matches wins, as outboxrelay's groups do.
func (tr *translator) topicCreation() {
	keys := map[string]string{}
	for _, k := range tr.conn.Keys() {
		if strings.HasPrefix(k, topicCreationPrefix) {
			v, _ := tr.get(k)
			keys[strings.TrimPrefix(k, topicCreationPrefix)] = v
		}
	}
	if len(keys) == 0 {
		return
	}
	if v, ok := keys["enable"]; ok && strings.EqualFold(strings.TrimSpace(v), "false") {
		tr.note(topicCreationPrefix+"enable", Info, "topic creation is off, as in outboxrelay by default")
		return
	}
	delete(keys, "enable")
	_, hasPart := keys["default.partitions"]
	_, hasRF := keys["default.replication.factor"]
	if !hasPart || !hasRF {
		tr.note(topicCreationPrefix+"default", Warning, "Kafka Connect creates no topic unless topic.creation.default.partitions and topic.creation.default.replication.factor are both set; outboxrelay creates none either (kafka.topic_creation stays off)")
		return
	}
	var groupNames []string
	if v, ok := keys["groups"]; ok {
		for g := range strings.SplitSeq(v, ",") {
			if g = strings.TrimSpace(g); g != "" {
				groupNames = append(groupNames, g)
			}
		}
		delete(keys, "groups")
	}
	tc := topicCreation{Enabled: true, topicSettings: tr.topicGroupSettings(keys, "default")}
	for _, g := range groupNames {
		if tg, ok := tr.topicGroup(keys, g); ok {
			tc.Groups = append(tc.Groups, tg)
		}
	}
	// Keys of groups not listed in topic.creation.groups are ignored, as
	// Kafka Connect ignores them.
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		group, _, _ := strings.Cut(k, ".")
		if group != "default" && !slices.Contains(groupNames, group) {
			tr.note(topicCreationPrefix+k, Info, "belongs to no group of topic.creation.groups; ignored, as Kafka Connect does")
		}
	}
	var n yaml.Node
	if err := n.Encode(tc); err != nil {
		tr.note(topicCreationPrefix+"default", Unsupported, "%v", err)
		return
	}
	tr.set("kafka.topic_creation", &n)
	tr.note(topicCreationPrefix+"default", Info, "kafka.topic_creation: the relay creates each topic before its first record, with the first matching group's settings or the default group's")
}

// topicGroupSettings reads a group's partitions, replication factor and
// topic configs from keys (topic.creation.* with the prefix cut).
func (tr *translator) topicGroupSettings(keys map[string]string, group string) topicSettings {
	var s topicSettings
	prefix := group + "."
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		opt, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		v := strings.TrimSpace(keys[k])
		switch opt {
		case "partitions", "replication.factor":
			n, err := strconv.Atoi(v)
			if err != nil || n < -1 || n == 0 {
				tr.note(topicCreationPrefix+k, Unsupported, "%q is not a positive number or -1", v)
				continue
			}
			if opt == "partitions" {
				s.Partitions = n
			} else {
				s.ReplicationFactor = n
			}
		case "include", "exclude":
		default:
			if s.Configs == nil {
				s.Configs = map[string]string{}
			}
			s.Configs[opt] = v
		}
	}
	return s
}

// topicGroup reads the group g of topic.creation.groups: its include and
// exclude patterns and its settings; false when it cannot be used.
func (tr *translator) topicGroup(keys map[string]string, g string) (topicGroup, bool) {
	if g == "default" {
		tr.note(topicCreationPrefix+"groups", Unsupported, "a group may not be named default, which Kafka Connect reserves")
		return topicGroup{}, false
	}
	tg := topicGroup{Name: g, topicSettings: tr.topicGroupSettings(keys, g)}
	for _, which := range []string{"include", "exclude"} {
		for p := range strings.SplitSeq(keys[g+"."+which], ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			if _, err := regexp.Compile(`^(?:` + p + `)$`); err != nil {
				tr.note(topicCreationPrefix+g+"."+which, Unsupported, "pattern %q is not one outboxrelay reads (RE2 syntax, which lacks lookaround and backreferences): %v", p, err)
				continue
			}
			if which == "include" {
				tg.Include = append(tg.Include, p)
			} else {
				tg.Exclude = append(tg.Exclude, p)
			}
		}
	}
	if len(tg.Include) == 0 {
		tr.note(topicCreationPrefix+g+".include", Unsupported, "group %q has no include patterns; Kafka Connect requires them", g)
		return topicGroup{}, false
	}
	return tg, true
}
