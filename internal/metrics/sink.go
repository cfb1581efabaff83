package metrics

import (
	"context"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Sink returns s counting what passes through it: each message joins the
// in-flight set when Publish takes it and leaves it when its done callback
// reports the outcome, which is when it is counted as published (by topic,
// with its commit-to-acknowledgement latency) or failed.
func (m *Metrics) Sink(s connector.Sink) connector.Sink { return &sink{Sink: s, m: m} }

type sink struct {
	connector.Sink // Flush and Abort pass straight through
	m              *Metrics
}

func (s *sink) Publish(ctx context.Context, msg *connector.Message, done func(error)) error {
	topic, dead := msg.Topic, isDeadLetter(msg)
	e := s.m.sent(msg.Timestamp)
	err := s.Sink.Publish(ctx, msg, func(err error) {
		s.m.settled(e, topic, dead, err)
		done(err)
	})
	if err != nil {
		// Not sent, and done will not be called.
		s.m.settled(e, topic, dead, err)
	}
	return err
}

// isDeadLetter tells the runner's dead letters by the header that says why
// the event could not go to its own topic.
func isDeadLetter(m *connector.Message) bool {
	for _, h := range m.Headers {
		if h.Key == connector.HeaderError {
			return true
		}
	}
	return false
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
