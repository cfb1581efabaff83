package metrics

import "sync"

// OtherTopics is the topic label of the series that count every topic past
// the first [DefaultMaxTopics] (or [WithMaxTopics]) seen. Parentheses
// cannot be in a Kafka topic name, so no topic's own label is ever this.
const OtherTopics = "(other)"

// DefaultMaxTopics is how many topics get series of their own by default:
// more than the aggregate types of any outbox we know of, and few enough
// that /metrics stays a few tens of kilobytes (each topic costs about
// three series of about 100 bytes).
const DefaultMaxTopics = 100

// WithMaxTopics sets how many topics get series of their own (label topic
// of outboxrelay_events_published_total, outboxrelay_publish_errors_total
// and outboxrelay_kafka_produce_bytes_total); the others share the label
// [OtherTopics]. n <= 0 means [DefaultMaxTopics].
func WithMaxTopics(n int) Option {
	return func(m *Metrics) {
		if n > 0 {
			m.topics.max = n
		}
	}
}

// WithDeadLetterTopic gives the dead letter topic (kafka.dead_letter_topic)
// a label of its own, past the bound of [WithMaxTopics] too. Empty: none.
func WithDeadLetterTopic(topic string) Option {
	return func(m *Metrics) {
		if topic != "" {
			m.topics.pin(topic)
			m.deadLetterTopic = topic
		}
	}
}

// topicLabels gives each topic its label: its own name for the first max
// topics seen since the relay started, [OtherTopics] for any other. Topics
// are input (an aggregate type names one), so without a bound every new
// aggregate type would add series for good, a few hundred bytes of
// /metrics each.
//
// First seen, not first by name: a label once given is never taken back,
// so a series never stops in the middle of a run, whatever topic comes
// next. Which topics got labels can differ from one run to the next, but
// counters start again at every restart anyway. The dead letter topic
// always gets its own label ([WithDeadLetterTopic]): there is one, and its
// count matters most when many others arrive.
type topicLabels struct {
	max int

	mu sync.RWMutex
	// own holds the topics with labels of their own: true for a pinned
	// one, which does not count towards max.
	own map[string]bool
	n   int // unpinned topics in own
}

func newTopicLabels() *topicLabels {
	return &topicLabels{max: DefaultMaxTopics, own: map[string]bool{}}
}

// label is topic's label, giving it its own while there is room.
func (l *topicLabels) label(topic string) string {
	l.mu.RLock()
	_, ok := l.own[topic]
	full := l.n >= l.max
	l.mu.RUnlock()
	if ok {
		return topic
	}
	if full {
		return OtherTopics
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.own[topic]; ok {
		return topic
	}
	if l.n < l.max {
		l.own[topic] = false
		l.n++
		return topic
	}
	return OtherTopics
}

// pin gives topic its own label even past the bound.
func (l *topicLabels) pin(topic string) {
	l.mu.Lock()
	if _, ok := l.own[topic]; !ok {
		l.own[topic] = true
	}
	l.mu.Unlock()
}
