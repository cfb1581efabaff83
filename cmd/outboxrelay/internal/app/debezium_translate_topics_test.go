package app_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/debezium"
	"github.com/outboxrelay/outboxrelay/sink"
)

func TestTranslateTopicCreation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  map[string]string
		want  sink.TopicCreation
		note  string // words of a note
		unsup bool   // the translation is refused
	}{
		{name: "default and groups", opts: map[string]string{
			"topic.creation.default.partitions": "3", "topic.creation.default.replication.factor": "-1",
			"topic.creation.default.retention.ms": "86400000",
			"topic.creation.groups":               "orders, logs",
			"topic.creation.orders.include":       `outbox\.event\.order.*`, "topic.creation.orders.exclude": `outbox\.event\.order-test`,
			"topic.creation.orders.partitions": "12", "topic.creation.orders.cleanup.policy": "compact",
			"topic.creation.logs.include": "logs.*,audit", "topic.creation.logs.replication.factor": "2",
			"topic.creation.stray.include": "x",
		}, want: sink.TopicCreation{Enabled: true,
			TopicSettings: sink.TopicSettings{Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{"retention.ms": "86400000"}},
			Groups: []sink.TopicGroup{
				{Name: "orders", Include: []string{`outbox\.event\.order.*`}, Exclude: []string{`outbox\.event\.order-test`},
					TopicSettings: sink.TopicSettings{Partitions: 12, Configs: map[string]string{"cleanup.policy": "compact"}}},
				{Name: "logs", Include: []string{"logs.*", "audit"}, TopicSettings: sink.TopicSettings{ReplicationFactor: 2}},
			}}, note: "belongs to no group"},
		{name: "without the default group's partitions nothing is created",
			opts: map[string]string{"topic.creation.default.replication.factor": "3"}, note: "creates no topic unless"},
		{name: "a group without include is refused", opts: map[string]string{
			"topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1", "topic.creation.groups": "g",
		}, note: "no include patterns", unsup: true},
		{name: "a lookahead is refused", opts: map[string]string{
			"topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1", "topic.creation.groups": "g",
			"topic.creation.g.include": "a(?=b)",
		}, note: "RE2", unsup: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, baseConnector(tc.opts), debezium.Env{})
			if (tr.Err() != nil) != tc.unsup {
				t.Fatalf("Err() = %v; notes:\n%s", tr.Err(), notesText(tr))
			}
			if !strings.Contains(notesText(tr), tc.note) {
				t.Errorf("no note saying %q; notes:\n%s", tc.note, notesText(tr))
			}
			if tc.unsup {
				return
			}
			y, err := tr.YAML(false)
			if err != nil {
				t.Fatal(err)
			}
			var c config.Config
			if err := config.Parse(y, &c); err != nil {
				t.Fatalf("the translation does not load: %v\n%s", err, y)
			}
			if got := c.Kafka.TopicCreation; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("kafka.topic_creation is\n%+v\nwant\n%+v\n%s", got, tc.want, y)
			}
		})
	}
}
