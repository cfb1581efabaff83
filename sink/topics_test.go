package sink

import (
	"reflect"
	"strings"
	"testing"
)

func TestTopicCreationSettings(t *testing.T) {
	tc := TopicCreation{Enabled: true,
		TopicSettings: TopicSettings{Partitions: 3, ReplicationFactor: 2, Configs: map[string]string{"retention.ms": "1000", "cleanup.policy": "delete"}},
		Groups: []TopicGroup{
			{Name: "compact", Include: []string{`outbox\.event\.(customer|account)`}, Exclude: []string{`outbox\.event\.customer`},
				TopicSettings: TopicSettings{Partitions: 12, Configs: map[string]string{"cleanup.policy": "compact"}}},
			{Name: "wide", Include: []string{`outbox\.event\..*`}, TopicSettings: TopicSettings{ReplicationFactor: 3}},
		}}
	if err := tc.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topic, group string
		want         TopicSettings
	}{
		{"outbox.event.account", "compact", TopicSettings{Partitions: 12, ReplicationFactor: 2, Configs: map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}}},
		{"outbox.event.customer", "wide", TopicSettings{Partitions: 3, ReplicationFactor: 3, Configs: tc.Configs}},
		{"outbox.event.accounts", "wide", TopicSettings{Partitions: 3, ReplicationFactor: 3, Configs: tc.Configs}},
		{"dlq", "", tc.TopicSettings},
	} {
		t.Run(c.topic, func(t *testing.T) {
			got, group := tc.Settings(c.topic)
			if group != c.group || !reflect.DeepEqual(got, c.want) {
				t.Errorf("Settings(%q) = %+v, group %q; want %+v, group %q", c.topic, got, group, c.want, c.group)
			}
		})
	}
	if got, _ := tc.Settings("outbox.event.account"); tc.Configs["cleanup.policy"] != "delete" || got.Configs["cleanup.policy"] != "compact" {
		t.Error("a group's configs changed the section's")
	}
}

func TestTopicCreationValidate(t *testing.T) {
	tc := TopicCreation{TopicSettings: TopicSettings{Partitions: -2, ReplicationFactor: 40000, Configs: map[string]string{"": "x"}},
		Groups: []TopicGroup{{Name: "a"}, {Name: "a", Include: []string{"a(?=b)"}}}}
	err := tc.Validate()
	for _, want := range []string{"kafka.topic_creation.partitions: -2", "replication_factor: 40000", "configs: a config has an empty name",
		"groups[0] (a).include: no pattern", "groups[1] (a): the name is used twice", "pattern `a(?=b)` is not a regular expression"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to say %q", err, want)
		}
	}
}
