package connector

import (
	"errors"
	"fmt"
)

// EventError is a problem with one event that retrying will not fix: a
// required column is NULL, the topic it routes to is not a legal Kafka topic
// name, or the record is larger than the broker accepts. It names the event
// so an operator can find the row.
type EventError struct {
	EventID string
	// Origin says where the row came from (see [Event.Origin]).
	Origin string
	Err    error
}

func (e *EventError) Error() string {
	id := e.EventID
	if id == "" {
		id = "(no id)"
	}
	if e.Origin != "" {
		return fmt.Sprintf("outbox event %s (%s): %v", id, e.Origin, e.Err)
	}
	return fmt.Sprintf("outbox event %s: %v", id, e.Err)
}

func (e *EventError) Unwrap() error { return e.Err }

// RecordTooLargeError says a record is larger than the broker accepts.
type RecordTooLargeError struct {
	Size int
	// Limit is the limit the relay checked against; 0 when the broker
	// refused the record itself (Cause is its error).
	Limit int
	Cause error
}

func (e *RecordTooLargeError) Error() string {
	if e.Limit == 0 {
		return fmt.Sprintf("the broker refused the record (%d bytes) as larger than the topic's max.message.bytes: %v; make the payload smaller or raise the limit", e.Size, e.Cause)
	}
	return fmt.Sprintf("record is %d bytes, more than the broker's limit of %d (message.max.bytes / max.message.bytes); make the payload smaller or raise the limit", e.Size, e.Limit)
}

func (e *RecordTooLargeError) Unwrap() error { return e.Cause }

// permanentError marks an error that retrying the same work cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that a retry cannot fix, such as a missing
// table or a configuration the server rejects. The runner stops on it
// instead of reconnecting. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, is an [EventError]
// or was marked with [Permanent].
func IsPermanent(err error) bool {
	var ee *EventError
	var pe permanentError
	return errors.As(err, &ee) || errors.As(err, &pe)
}

// ConnectError is a failure to connect to a service the relay needs,
// PostgreSQL or Kafka, where no connection was lost because none was made.
// A source or sink returns one so that what the user reads names the
// service and its address, with what to do; the runner's restart line
// says it cannot connect, rather than that a run was interrupted. Marked
// [Permanent] (a password refused, say), it stops the relay.
type ConnectError struct {
	// Service is what the relay could not connect to: "PostgreSQL" or
	// "Kafka".
	Service string
	// Addr is where: host:port, or the brokers.
	Addr string
	// Err is why, with what to do.
	Err error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot connect to %s at %s: %v", e.Service, e.Addr, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }
