package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewSectionKeys: the keys of cdc.message_prefixes, cdc.cleanup and
// kafka.topic_creation load, and their problems are reported with the
// rest; logical messages with source poll, which would never be read,
// are refused.
func TestNewSectionKeys(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // words of the error; none: it loads
	}{
		{name: "valid", file: "cdc:\n  message_prefixes: [outbox]\n  cleanup: {enabled: true, retention: 1h, batch_size: 10, interval: 10s}\n" +
			"kafka:\n  brokers: [k:9092]\n  topic_creation:\n    enabled: true\n    partitions: 3\n    configs: {cleanup.policy: compact}\n    groups: [{name: g, include: ['a.*'], partitions: 6}]\n"},
		{name: "problems", file: "cdc:\n  message_prefixes: ['', outboxrelay-heartbeat]\n  cleanup: {batch_size: -1}\n" +
			"kafka:\n  brokers: [k:9092]\n  topic_creation:\n    partitions: -5\n    groups: [{name: g}]\n",
			want: []string{"cdc.message_prefixes: a prefix is empty", "heartbeat's prefix", "cdc.cleanup.batch_size: -1",
				"kafka.topic_creation.partitions: -5", "groups[0] (g).include: no pattern"}},
		{name: "messages with the poller", file: "source: poll\ncdc:\n  message_prefixes: [outbox]\nkafka:\n  brokers: [k:9092]\n",
			want: []string{"cdc.message_prefixes (outbox) needs source cdc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte("postgres:\n  url: postgres://u@h/db\n"+tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(path, nil)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if !c.CDC.Cleanup.Enabled || c.CDC.MessagePrefixes[0] != "outbox" || c.Kafka.TopicCreation.Groups[0].Partitions != 6 ||
					c.Kafka.TopicCreation.Configs["cleanup.policy"] != "compact" {
					t.Errorf("loaded %+v %+v", c.CDC, c.Kafka.TopicCreation)
				}
				return
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v; want it to say %q", err, w)
				}
			}
		})
	}
}
