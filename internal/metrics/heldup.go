package metrics

import (
	"errors"
	"time"
)

// HeldUp is an error that holds publishing up until someone acts on the
// Kafka side, which restarting alone cannot do: a topic that does not exist
// where topics are not created on first use, a grant the relay's principal
// lacks. The sink's errors implement it. A run that fails with one makes
// readiness fail ([Progress].HeldUp) until Kafka acknowledges a record of
// the topic it names, or any record when it names none: restarting from
// the checkpoint begins the wait for an acknowledgement again, so the
// progress check alone would pass between the restarts.
type HeldUp interface {
	error
	// HeldUpTopic is the topic held up; "" when every topic is.
	HeldUpTopic() string
}

// HeldUpSince is publishing held up: by what, on which topic ("" for
// every topic), and since when.
type HeldUpSince struct {
	Topic string
	Err   error
	Since time.Time
}

// heldUpLocked records err, the failure of a run, when it holds publishing
// up; m.mu is held. The first time of a hold up on one topic stays.
func (m *Metrics) heldUpLocked(err error, now time.Time) {
	var hu HeldUp
	if !errors.As(err, &hu) {
		return
	}
	since := now
	if h := m.heldUp; h != nil && h.Topic == hu.HeldUpTopic() {
		since = h.Since
	}
	m.heldUp = &HeldUpSince{Topic: hu.HeldUpTopic(), Err: err, Since: since}
}

// releaseLocked ends a hold up that an acknowledgement of a record of
// topic lifts; m.mu is held.
func (m *Metrics) releaseLocked(topic string) {
	if h := m.heldUp; h != nil && (h.Topic == "" || h.Topic == topic) {
		m.heldUp = nil
	}
}
