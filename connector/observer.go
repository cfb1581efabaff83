package connector

import "time"

// Observer is told what the runner does, at the points that matter to
// whoever watches it from outside (metrics, health probes): a run of the
// source started or ended, a batch taken and then handed to the sink, a
// dead letter acknowledged, a failed run restarted. It adds no goroutine and no channel to an
// event's way: each method is called in the middle of the work it
// reports, from the goroutine its comment names, so none may block: record
// what it needs and return.
//
// The runner's goroutine calls SourceStarted, BatchTaken, BatchHandedOver
// and RunFailed, one at a time; SourceStopped and DeadLettered come from
// other goroutines, concurrently with those and with each other.
//
// The acknowledgement of each message is not reported here: it passes
// through the [Sink], whose done callback a decorator of the sink observes
// together with the message it belongs to.
type Observer interface {
	// SourceStarted is called just before each call of the source's Run,
	// the first and every restart.
	SourceStarted()
	// SourceStopped is called once for every SourceStarted, from the
	// goroutine that ran the source, as soon as Run has returned, with
	// what it returned, and before the runner acts on that.
	SourceStopped(err error)
	// BatchTaken is called when the runner has taken a batch of events
	// events from the source, before it routes any of them.
	BatchTaken(events int)
	// BatchHandedOver is called once for every BatchTaken, before the
	// next: every message of the batch has been handed to the sink (and,
	// with Kafka transactions, the commit the batch made due has
	// returned), or publishing it failed. In between, the runner is busy
	// with that batch and takes no other.
	BatchHandedOver()
	// DeadLettered is called when Kafka has acknowledged the dead letter
	// record of an event that can never be published to its own topic,
	// from the goroutine that calls the sink's done, with what the record
	// says of the event.
	DeadLettered(d DeadLetter)
	// RunFailed is called when a run of the source has ended on err and
	// the runner will start the source again from its last checkpoint
	// after retryIn: after that run's SourceStopped, before the next
	// SourceStarted. A run that ends the runner (a stop asked for, an
	// error no restart gets past) is not reported here: Run returns it.
	RunFailed(err error, retryIn time.Duration)
}

// DeadLetter is what an [Observer] is told of an event sent to the dead
// letter topic: what its dead letter record says.
type DeadLetter struct {
	// EventID is the event's id.
	EventID string
	// Topic is the topic the event was routed to; empty when routing
	// did not get that far.
	Topic string
	// Reason is why it cannot be published there, cut to
	// DeadLetterHeaderBytes as the record's error header is.
	Reason string
}

// deadLetterOf is what the dead letter record dl of the event that cause
// names says of it.
func deadLetterOf(dl *Message, cause *EventError) DeadLetter {
	d := DeadLetter{EventID: cause.EventID, Reason: Shorten(cause.Err.Error(), DeadLetterHeaderBytes)}
	for _, h := range dl.Headers {
		if h.Key == HeaderOriginalTopic {
			d.Topic = string(h.Value)
		}
	}
	return d
}

// WithObserver has the runner tell o what it does; the default, and a nil
// o, tell no one.
func WithObserver(o Observer) Option {
	return func(r *Runner) {
		if o != nil {
			r.obs = o
		}
	}
}

// noObserver is the runner's Observer when none is given.
type noObserver struct{}

func (noObserver) SourceStarted()                 {}
func (noObserver) SourceStopped(error)            {}
func (noObserver) BatchTaken(int)                 {}
func (noObserver) BatchHandedOver()               {}
func (noObserver) DeadLettered(DeadLetter)        {}
func (noObserver) RunFailed(error, time.Duration) {}
