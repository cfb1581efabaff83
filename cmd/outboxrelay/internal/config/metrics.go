package config

import (
	"fmt"

	"github.com/outboxrelay/outboxrelay/internal/metrics"
)

// Metrics shapes what /metrics exports.
type Metrics struct {
	MaxTopics int `yaml:"max_topics" doc:"How many topics get series of their own in the metrics labelled by topic (outboxrelay_events_published_total, outboxrelay_publish_errors_total, outboxrelay_kafka_produce_bytes_total): the first this many published to since the relay started, and the dead letter topic; the rest are counted together under topic=\"(other)\", so that aggregate types, which are data, cannot grow /metrics without bound."`
}

// validate reports every problem with the metrics section.
func (m Metrics) validate() error {
	if m.MaxTopics < 0 {
		return fmt.Errorf("metrics.max_topics: %d is negative; it is how many topics get series of their own (0 for the default, %d)", m.MaxTopics, metrics.DefaultMaxTopics)
	}
	return nil
}
