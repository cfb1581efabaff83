package sink

import (
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// TestTopicCreationRefusedKey: a refusal names the setting behind it, a
// group's own when the group set it.
func TestTopicCreationRefusedKey(t *testing.T) {
	tc := TopicCreation{Enabled: true, TopicSettings: TopicSettings{ReplicationFactor: 2},
		Groups: []TopicGroup{{Name: "wide", Include: []string{"w"}, TopicSettings: TopicSettings{ReplicationFactor: 3}},
			{Name: "many", Include: []string{"m"}, TopicSettings: TopicSettings{Partitions: 99, Configs: map[string]string{"a": "b"}}}}}
	for _, c := range []struct {
		group string
		err   error
		want  string
	}{
		{"", kerr.InvalidReplicationFactor, "kafka.topic_creation.replication_factor"},
		{"wide", kerr.InvalidReplicationFactor, "kafka.topic_creation.groups (wide).replication_factor"},
		{"many", kerr.InvalidReplicationFactor, "kafka.topic_creation.replication_factor"},
		{"many", kerr.InvalidPartitions, "kafka.topic_creation.groups (many).partitions"},
		{"wide", kerr.InvalidConfig, "kafka.topic_creation.configs"},
		{"many", kerr.InvalidConfig, "kafka.topic_creation.groups (many).configs"},
		{"many", kerr.PolicyViolation, "kafka.topic_creation.groups (many)"},
		{"", kerr.PolicyViolation, "kafka.topic_creation"},
	} {
		if got := tc.refusedKey(c.group, c.err); got != c.want {
			t.Errorf("refusedKey(%q, %v) = %q, want %q", c.group, c.err, got, c.want)
		}
	}
}

// TestTopicCreationRefusalRemembered: a topic the broker refused to create
// fails each later event at once, with the same error, until refusedFor
// has passed; then the broker is asked again.
func TestTopicCreationRefusalRemembered(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var creates atomic.Int32
	c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		creates.Add(1)
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	now := time.Now()
	cr := &creator{cfg: TopicCreation{Enabled: true, TopicSettings: TopicSettings{ReplicationFactor: 3}},
		known: map[string]struct{}{}, refused: map[string]refusal{}, now: func() time.Time { return now }}
	var refused *TopicRefusedError
	for range 3 {
		err := cr.ensure(t.Context(), cl, "t")
		if !errors.As(err, &refused) || refused.Topic != "t" || !errors.Is(err, kerr.InvalidReplicationFactor) {
			t.Fatalf("ensure = %v, want the broker's refusal of topic t", err)
		}
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d CreateTopics requests for three events, want 1", n)
	}
	now = now.Add(refusedFor)
	_ = cr.ensure(t.Context(), cl, "t")
	if n := creates.Load(); n != 2 {
		t.Errorf("%d CreateTopics requests once the refusal is %s old, want 2", n, refusedFor)
	}
}
