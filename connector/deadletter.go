package connector

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Dead letter headers, beside the event's id.
const (
	// HeaderError says why the event could not go to its own topic.
	HeaderError = "outboxrelay.error"
	// HeaderOriginalTopic is the topic the event was routed to, when
	// routing got that far.
	HeaderOriginalTopic = "outboxrelay.topic"
)

// Markers of what a dead letter record leaves out. A dead letter record
// must fit the dead letter topic's limit, or the event it stands for could
// be neither published nor accounted for. Each marker's value is the size
// in bytes, in decimal, of what the event had there.
const (
	// HeaderOmittedValue: the record has no value; the event's payload
	// was this large. Always set when the payload is left out, be it
	// because the event's own record was too large or because the dead
	// letter record would have been.
	HeaderOmittedValue = "outboxrelay.omitted.value"
	// HeaderOmittedKey: the record has no key; the aggregate id was this
	// large.
	HeaderOmittedKey = "outboxrelay.omitted.key"
	// HeaderOmittedError: HeaderError holds only the first
	// DeadLetterHeaderBytes of the error text, which was this large.
	HeaderOmittedError = "outboxrelay.omitted.error"
	// HeaderOmittedTopic: HeaderOriginalTopic holds only the first
	// DeadLetterHeaderBytes of the topic name, which was this large.
	HeaderOmittedTopic = "outboxrelay.omitted.topic"
)

// DeadLetterHeaderBytes is what a dead letter record that does not fit
// keeps of its error and topic headers, and the size above which its key
// is left out before anything else of it. A legal topic name is at most
// 249 bytes; an error text longer than this quotes a value.
const DeadLetterHeaderBytes = 1024

// deadLetter builds the message that stands in for e on the dead letter
// topic: its key, its id and why, and its value unless the value is what
// made it unpublishable.
func (r *Runner) deadLetter(e *Event, routed *Message, cause *EventError) *Message {
	dl := &Message{
		Topic:     r.cfg.DeadLetterTopic,
		Key:       []byte(e.AggregateID),
		Value:     e.Payload,
		Timestamp: e.CommitTime,
		EventID:   e.ID,
		Headers: []Header{
			{Key: "id", Value: []byte(e.ID)},
			{Key: HeaderError, Value: []byte(cause.Err.Error())},
		},
	}
	if routed.Topic != "" {
		dl.Headers = append(dl.Headers, Header{Key: HeaderOriginalTopic, Value: []byte(routed.Topic)})
	}
	var tooLarge *RecordTooLargeError
	if errors.As(cause, &tooLarge) {
		omitValue(dl)
	}
	return dl
}

// fitDeadLetter leaves out of dl what makes it larger than limit, in this
// order, each step only while dl is still too large: the value; a key
// over DeadLetterHeaderBytes; the error and topic headers past their first
// DeadLetterHeaderBytes; the key whatever its size. Each leaves a marker
// header (HeaderOmitted*). The id header always stays: without it the
// record accounts for nothing. It reports whether dl fits.
//
// A limit of 0 means the limit is not known (the broker refused a dead
// letter record that the sink's own check let through): dl then becomes
// the smallest record that still says what the event was, the value, a
// large key and the headers' excess left out, and fits is true because
// only the broker can tell.
func fitDeadLetter(dl *Message, limit int) (fits bool) {
	known := limit > 0
	fitting := func() bool { return known && dl.Size() <= limit }
	if fitting() {
		return true
	}
	omitValue(dl)
	if fitting() {
		return true
	}
	if len(dl.Key) > DeadLetterHeaderBytes {
		omitKey(dl)
		if fitting() {
			return true
		}
	}
	cutHeader(dl, HeaderError, HeaderOmittedError)
	cutHeader(dl, HeaderOriginalTopic, HeaderOmittedTopic)
	if !known || fitting() {
		return true
	}
	omitKey(dl)
	return fitting()
}

func omitValue(dl *Message) {
	if dl.Value == nil || hasHeader(dl, HeaderOmittedValue) {
		return
	}
	dl.Headers = append(dl.Headers, Header{Key: HeaderOmittedValue, Value: strconv.AppendInt(nil, int64(len(dl.Value)), 10)})
	dl.Value = nil
}

func omitKey(dl *Message) {
	if dl.Key == nil {
		return
	}
	dl.Headers = append(dl.Headers, Header{Key: HeaderOmittedKey, Value: strconv.AppendInt(nil, int64(len(dl.Key)), 10)})
	dl.Key = nil
}

// cutHeader cuts header key of dl to DeadLetterHeaderBytes, on a UTF-8
// character boundary, and adds marker with its size.
func cutHeader(dl *Message, key, marker string) {
	for i := range dl.Headers {
		h := &dl.Headers[i]
		if h.Key != key || len(h.Value) <= DeadLetterHeaderBytes {
			continue
		}
		dl.Headers = append(dl.Headers, Header{Key: marker, Value: strconv.AppendInt(nil, int64(len(h.Value)), 10)})
		h = &dl.Headers[i] // append may have moved it
		h.Value = h.Value[:cutUTF8(h.Value, DeadLetterHeaderBytes)]
		return
	}
}

func hasHeader(m *Message, key string) bool {
	for _, h := range m.Headers {
		if h.Key == key {
			return true
		}
	}
	return false
}

// cutUTF8 is the length of the longest prefix of b, at most n bytes, that
// does not end inside a UTF-8 character.
func cutUTF8(b []byte, n int) int {
	if len(b) <= n {
		return len(b)
	}
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return n
}

// Shorten returns s cut to at most n bytes on a character boundary, saying
// how long it was, for logs and errors that quote a value of any size.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:cutUTF8([]byte(s[:n+1]), n)] + "… (" + strconv.Itoa(len(s)) + " bytes in all)"
}

// deadLetterRefusedError is the broker's refusal of a dead letter record
// that the sink's own size check let through: the event's own fate was
// settled already (cause), so the next run sends its dead letter at once,
// and as small as it can be (fitDeadLetter with no limit). A second
// refusal, of that smallest record, stops the relay.
type deadLetterRefusedError struct {
	cause   *EventError // why the event went to the dead letter topic
	refusal error       // the broker's refusal of its dead letter record
	minimal bool        // the refused record was already the smallest
	size    int         // the refused record's size
}

func (e *deadLetterRefusedError) Error() string {
	return fmt.Sprintf("the broker refused the dead letter record of event %s: %v", e.cause.EventID, e.refusal)
}

func (e *deadLetterRefusedError) Unwrap() error { return e.refusal }

// deadLetterUnwritable is the error that stops the relay when even the
// smallest dead letter record of an event cannot be written: the event is
// neither published nor accounted for, and restarting cannot change that.
// It is an [*EventError], so the poller counts it against the row and in
// the end moves the row to its dead-letter table.
func (r *Runner) deadLetterUnwritable(e *EventError, size int, why error) error {
	return Permanent(&EventError{EventID: e.EventID, Origin: e.Origin, Err: fmt.Errorf(
		"cannot be published (%s), and its dead letter record cannot be written either, even without value and key and with its headers cut (%d bytes): %w; "+
			"raise max.message.bytes of topic %s, or fix the row and publish it again",
		Shorten(e.Err.Error(), DeadLetterHeaderBytes), size, why, r.cfg.DeadLetterTopic)})
}

// omitted lists the markers of what dl leaves out, for the log.
func omitted(dl *Message) string {
	var b strings.Builder
	for _, h := range dl.Headers {
		if what, ok := strings.CutPrefix(h.Key, "outboxrelay.omitted."); ok {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (%s bytes)", what, h.Value)
		}
	}
	return b.String()
}
