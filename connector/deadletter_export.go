package connector

// NewDeadLetter is the dead letter record the runner writes for e to
// topic, for a tool that sends events on outside a runner (outboxrelay
// replay and dead-letters redrive): the same key, value, id, error and
// original topic headers, so that one reader reads both. routed is the
// message routing made of e, or an empty one when routing failed.
func NewDeadLetter(topic string, e *Event, routed *Message, cause *EventError) *Message {
	r := Runner{cfg: RunnerConfig{DeadLetterTopic: topic}}
	return r.deadLetter(e, routed, cause)
}

// FitDeadLetter leaves out of dl what makes it larger than limit, as the
// runner does before it writes a dead letter record (0: the limit is not
// known, and dl becomes the smallest record that still names the event);
// it reports whether dl fits.
func FitDeadLetter(dl *Message, limit int) bool { return fitDeadLetter(dl, limit) }
