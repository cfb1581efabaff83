package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Sink returns s counting what passes through it: each message joins the
// in-flight set when Publish takes it and leaves it when its done callback
// reports the outcome, which is when it is counted as published (by topic,
// with its commit-to-acknowledgement latency) or failed. Topics past the
// bound of [WithMaxTopics] are counted under [OtherTopics].
//
// It is a decorator, not a runner hook, because what it counts belongs to
// each message (its topic, its commit time and stages, when it was handed
// over) and is settled in that message's own done callback, which the
// Sink contract already carries. It adds no goroutine: Publish runs on the
// caller's, and the wrapped callback on whichever goroutine the sink calls
// done from.
//
// It runs for every event, so it costs no allocation once as many messages
// have been in flight as will be (their flights are reused), and no label
// lookup (each topic's counters are looked up once).
func (m *Metrics) Sink(s connector.Sink) connector.Sink {
	return &sink{Sink: s, m: m, topics: map[string]*topicCounters{}}
}

type sink struct {
	connector.Sink // Flush and Abort pass straight through
	m              *Metrics
	// topics holds the counters of every topic with a label of its own
	// published to so far, which [topicLabels] bounds; other holds those
	// of the rest, once one came. Only Publish uses them, and Publish is
	// called from one goroutine.
	topics map[string]*topicCounters
	other  *topicCounters
}

// topicCounters is a topic's child of the published counter. Its errors
// are rare, and counted through the vector, so that a topic has no
// publish_errors_total series until it has an error.
type topicCounters struct {
	label     string
	published prometheus.Counter
}

func (s *sink) counters(msg *connector.Message) *topicCounters {
	if c, ok := s.topics[msg.Topic]; ok {
		return c
	}
	label := s.m.topics.label(msg.Topic)
	if label == OtherTopics {
		if s.other == nil {
			s.other = &topicCounters{label, s.m.published.WithLabelValues(label)}
		}
		return s.other
	}
	c := &topicCounters{label, s.m.published.WithLabelValues(label)}
	s.topics[msg.Topic] = c
	return c
}

func (s *sink) Publish(ctx context.Context, msg *connector.Message, done func(error)) error {
	f := s.m.sent(msg, s.counters(msg), done)
	err := s.Sink.Publish(ctx, msg, f.ack)
	if err != nil {
		// Not sent, and done will not be called.
		s.m.settled(f, err)
	}
	return err
}

// A flight is a message handed to the sink and not yet acknowledged.
type flight struct {
	prev, next     *flight
	commit, sent   time.Time
	stages         connector.Stages
	counters       *topicCounters
	eventID, topic string
	done           func(error)
	// ack settles the flight and calls done: the callback the sink gets.
	// It is made once per flight, which is reused once settled.
	ack func(error)
}

// flights is a list of flights in the order they were handed over, and
// the settled ones kept for reuse.
type flights struct {
	head, tail *flight
	n          int
	free       *flight // linked by next
}

func (l *flights) push(m *Metrics) *flight {
	f := l.free
	if f != nil {
		l.free = f.next
		f.next = nil
	} else {
		f = &flight{}
		f.ack = func(err error) {
			done := f.done
			m.settled(f, err)
			done(err)
		}
	}
	f.prev = l.tail
	if l.tail != nil {
		l.tail.next = f
	} else {
		l.head = f
	}
	l.tail = f
	l.n++
	return f
}

// remove takes f out of the list and keeps it for reuse.
func (l *flights) remove(f *flight) {
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		l.head = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else {
		l.tail = f.prev
	}
	l.n--
	*f = flight{ack: f.ack, next: l.free}
	l.free = f
}

// sent records a message handed to the sink.
func (m *Metrics) sent(msg *connector.Message, c *topicCounters, done func(error)) *flight {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.inflight.push(m)
	f.commit, f.sent, f.stages, f.counters, f.done = msg.Timestamp, now, msg.Stages, c, done
	f.eventID, f.topic = msg.EventID, msg.Topic
	if msg.Topic != m.deadLetterTopic {
		m.status.lastRead = Seen{EventID: msg.EventID, Topic: msg.Topic, Timestamp: msg.Timestamp, At: now}
		m.status.hasRead = true
	}
	return f
}

// settled records the outcome of a message handed to the sink: err is nil
// once Kafka has acknowledged it. f is reused afterwards.
func (m *Metrics) settled(f *flight, err error) {
	now := m.now()
	m.mu.Lock()
	commit, sent, stages, c := f.commit, f.sent, f.stages, f.counters
	if err == nil {
		m.status.acked++
		m.releaseLocked(f.topic)
		if f.topic != m.deadLetterTopic {
			m.status.lastAcked = Seen{EventID: f.eventID, Topic: f.topic, Timestamp: commit, At: now}
			m.status.hasAcked = true
		}
	}
	m.inflight.remove(f)
	m.mu.Unlock()
	if err != nil {
		m.publishErrors.WithLabelValues(c.label).Inc()
		return
	}
	c.published.Inc()
	if !commit.IsZero() {
		// Clocks of two hosts: a commit "in the future" is a skew, not a
		// negative latency.
		total := now.Sub(commit)
		m.latency.Observe(max(total, 0).Seconds())
		if total >= SlowEvent {
			m.slow.observe(commit, stages, sent, now)
		}
	}
}

// SlowEvent is how long from its commit to Kafka's acknowledgement makes an
// event slow: for those, outboxrelay_slow_event_stage_seconds says which
// stage held it.
const SlowEvent = 10 * time.Millisecond

// The stages of a slow event, as outboxrelay_slow_event_stage_seconds
// labels them.
const (
	// StagePostgres is from the commit to the server sending it (CDC: the
	// walsender), or to the poller's claim.
	StagePostgres = "postgres"
	// StageNetwork is from the server sending it to the relay reading it
	// (CDC only).
	StageNetwork = "network"
	// StageRelay is from the relay reading it to handing it to the
	// producer: decoding, batching, routing, and waiting for room in the
	// producer's buffer.
	StageRelay = "relay"
	// StageKafka is from the producer taking it to Kafka acknowledging it:
	// the producer's batching and the broker.
	StageKafka = "kafka"
)

// stageObservers are the stage histogram's children, looked up once.
type stageObservers struct {
	postgres, network, relay, kafka prometheus.Observer
}

func newStageObservers(h *prometheus.HistogramVec) stageObservers {
	return stageObservers{
		postgres: h.WithLabelValues(StagePostgres), network: h.WithLabelValues(StageNetwork),
		relay: h.WithLabelValues(StageRelay), kafka: h.WithLabelValues(StageKafka),
	}
}

// observe records a slow event's stages; a time the source could not tell
// leaves its stage out, and the next stage starts from the last time
// known. PostgreSQL's times are its host's clock: a skew between the two
// hosts shifts time between the postgres and network stages (never below
// zero).
func (o stageObservers) observe(commit time.Time, st connector.Stages, sent, acked time.Time) {
	at := commit
	if !st.Sent.IsZero() {
		o.postgres.Observe(max(st.Sent.Sub(at), 0).Seconds())
		at = st.Sent
	}
	if !st.Received.IsZero() {
		if st.Sent.IsZero() {
			o.postgres.Observe(max(st.Received.Sub(at), 0).Seconds())
		} else {
			o.network.Observe(max(st.Received.Sub(at), 0).Seconds())
		}
		at = st.Received
	}
	o.relay.Observe(max(sent.Sub(at), 0).Seconds())
	o.kafka.Observe(max(acked.Sub(sent), 0).Seconds())
}

// Transactions and Commit pass a transactional sink through
// ([connector.Transactional]); the checkpoint a commit carries is not an
// event, and is not counted.
func (s *sink) Transactions() bool {
	t, ok := s.Sink.(connector.Transactional)
	return ok && t.Transactions()
}

func (s *sink) Commit(ctx context.Context, mark *connector.Message) error {
	return s.Sink.(connector.Transactional).Commit(ctx, mark)
}
