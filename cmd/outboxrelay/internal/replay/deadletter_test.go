package replay

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/connector"
)

// TestTopicInReason reads the topic out of the error the routing gives an
// event outside routing.topic_pattern, as the relay writes it into the
// dead letter record's reason, so that a change of its words fails here.
func TestTopicInReason(t *testing.T) {
	reason := (&connector.TopicNotAllowedError{Topic: "outbox.event.invoice", Pattern: `outbox\.event\.order`}).Error()
	if got := topicInReason(reason); got != "outbox.event.invoice" {
		t.Errorf("topicInReason(%q) = %q, want outbox.event.invoice", reason, got)
	}
	if got := topicInReason("record of 2000000 bytes is larger than topic x takes"); got != "" {
		t.Errorf("a reason naming no refused topic gave %q", got)
	}
}
