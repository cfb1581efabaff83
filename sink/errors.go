package sink

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outboxrelay/outboxrelay/connector"
)

// classify turns the errors that say this record can never be written into
// an [*connector.EventError], and those that hold its topic up until someone
// acts on the Kafka side into a [*TopicUnavailableError]; the others stay
// retryable as they are, naming the event.
func classify(eventID, topic string, size int, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		// The broker answers for a whole batch, so this may not be this
		// record's fault; the runner publishes a suspect alone before it
		// calls it unpublishable.
		return &connector.EventError{EventID: eventID, Err: &connector.RecordTooLargeError{Size: size, Cause: err}}
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.CorruptMessage):
		return &connector.EventError{EventID: eventID, Err: fmt.Errorf("the broker refused the record: %w", err)}
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.TopicAuthorizationFailed):
		return &TopicUnavailableError{Topic: topic, EventID: eventID, Err: err}
	}
	return fmt.Errorf("produce event %s: %w", eventID, err)
}

// TopicUnavailableError is a topic the brokers take no record for until
// someone acts on the Kafka side: it does not exist and they do not create
// topics on first use, or the relay's principal may not write to it. It is
// not an event's fault, and retrying is all the relay can do: the runner
// restarts from its checkpoint with backoff, which the event for the topic
// cannot pass, so this error is what the relay says at each step, and
// readiness fails while it lasts (HeldUpTopic).
type TopicUnavailableError struct {
	Topic   string
	EventID string
	// Err is the broker's: UNKNOWN_TOPIC_OR_PARTITION or
	// TOPIC_AUTHORIZATION_FAILED.
	Err error
}

func (e *TopicUnavailableError) Error() string {
	if errors.Is(e.Err, kerr.TopicAuthorizationFailed) {
		return fmt.Sprintf("the brokers refuse the relay's principal writes to topic %q (event %s waits for it): %v; "+
			"grant the principal WRITE and DESCRIBE on the topic (kafka-acls.sh --add --allow-principal User:<name> --operation Write --operation Describe --topic %s)",
			e.Topic, e.EventID, e.Err, e.Topic)
	}
	return fmt.Sprintf("topic %q does not exist and the brokers do not create topics on first use (event %s waits for it): %v; "+
		"create the topic (kafka-topics.sh --create --topic %s), or set kafka.topic_creation so that the relay creates it",
		e.Topic, e.EventID, e.Err, e.Topic)
}

func (e *TopicUnavailableError) Unwrap() error { return e.Err }

// HeldUpTopic names the topic this error holds up, for the readiness
// probe (metrics.HeldUp).
func (e *TopicUnavailableError) HeldUpTopic() string { return e.Topic }

// LimitLookupError is the brokers' refusal to tell the relay a record size
// limit: the broker's message.max.bytes, which it reads before its first
// record (DescribeConfigs on the cluster), or topics' max.message.bytes
// (DescribeConfigs on each topic). Without the broker's, nothing is
// published; kafka.max_record_bytes replaces both lookups.
type LimitLookupError struct {
	// Topics are the topics whose limits were asked for; none for the
	// broker's.
	Topics []string
	Err    error
}

const limitLookupFix = "or set kafka.max_record_bytes to the smallest max.message.bytes of the topics the relay writes, and it asks for no limit"

func (e *LimitLookupError) Error() string {
	switch len(e.Topics) {
	case 0:
		return fmt.Sprintf("read the brokers' record size limit (message.max.bytes), which the relay checks each record against before sending it: %v; "+
			"grant the relay's principal DescribeConfigs on the cluster (and on the topics it writes), "+limitLookupFix, e.Err)
	case 1:
		return fmt.Sprintf("read the record size limit (max.message.bytes) of topic %q: %v; grant the relay's principal DescribeConfigs on the topic, "+limitLookupFix,
			e.Topics[0], e.Err)
	}
	return fmt.Sprintf("read the record size limits (max.message.bytes) of %d topics, %s first: %v; grant the relay's principal DescribeConfigs on the topics, "+limitLookupFix,
		len(e.Topics), e.Topics[0], e.Err)
}

func (e *LimitLookupError) Unwrap() error { return e.Err }

// HeldUpTopic names what this error holds up, for the readiness probe
// (metrics.HeldUp): the topic asked for (the first of several), or ""
// for every topic when the broker's limit is not known.
func (e *LimitLookupError) HeldUpTopic() string {
	if len(e.Topics) == 0 {
		return ""
	}
	return e.Topics[0]
}

// refusedLookup is err as a [*LimitLookupError] for topics (none for the
// broker's limit) when the brokers refused the lookup to the relay's
// principal; other errors, which a retry may get past, as they are.
func refusedLookup(err error, topics ...string) error {
	if errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) {
		return &LimitLookupError{Topics: topics, Err: err}
	}
	return err
}
