package connector

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Message is the Kafka record an event becomes.
type Message struct {
	Topic     string
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// EventID is the outbox event's id, for errors and dead letters.
	EventID string
	// Stages are the event's [Stages], which the runner copies over
	// whatever the router made: a sink decorator measures with them.
	Stages Stages
	// Partition, when not nil, is the partition to write to instead of
	// the one the key hashes to (Debezium's partition placement). A
	// partition the topic does not have makes the message an
	// [*EventError].
	Partition *int32
	// Filtered says the router chose to write no record for the event, as
	// Kafka Connect's Filter transform drops one: the runner sends
	// nothing and counts the event as published.
	Filtered bool
}

// Router turns an event into the Kafka message for it. Route is called from
// the runner's one publishing goroutine, in commit order. An error that names
// the event ([*EventError]) means the event can never be published; the
// runner sends it to the dead letter topic or stops. ctx bounds whatever
// Route waits for (a schema registry, a catalog read); when it ends, Route
// returns an error that does not name the event.
type Router interface {
	Route(ctx context.Context, e *Event) (Message, error)
}

var _ Router = Routing{}

// Routing says how an event becomes a message. The zero value routes the
// way Debezium's Outbox Event Router does by default.
type Routing struct {
	// TopicPrefix is put before the aggregate type to name the topic.
	// Default "outbox.event.".
	TopicPrefix string `yaml:"topic_prefix" doc:"Topic is this prefix plus the aggregate type, as Debezium's outbox router."`
	// Topic, when set, sends every event to this one topic instead.
	Topic string `yaml:"topic" doc:"Send every event to this one topic instead." default:"(none)"`
	// TypeHeader, when set, adds the event's type as a header of this name.
	// Default: no type header, as Debezium.
	TypeHeader string `yaml:"type_header" doc:"Also put the event type in a header of this name." default:"(none)"`
	// TopicPattern, when set, is a regular expression (RE2) that every
	// topic routed to must match in full; an event whose topic does not is
	// a [*TopicNotAllowedError]. Aggregate types are data, and each one
	// names a topic, which Kafka creates and the relay keeps a producer's
	// state for: the pattern is how a user bounds them. Default: any
	// legal topic name.
	TopicPattern string `yaml:"topic_pattern" doc:"Regular expression (RE2) every topic an event routes to must match in full, e.g. outbox\\.event\\.(order|customer); an event routed outside it is an error of that event (the dead letter topic, or a stop naming it), so that aggregate types, which are data, cannot create topics without bound." default:"(any topic)"`
	// HeadersColumn, when set, names a column holding a JSON object
	// (jsonb, json or text) whose entries become headers, after id and
	// the type header (headers.go). Default: none.
	HeadersColumn string `yaml:"headers_column" doc:"Column holding a JSON object (jsonb) whose entries become record headers, one per key, after id: a string value as is, any other as its JSON text, null as a null header; a W3C traceparent and tracestate among them are the event's trace context. A row whose value is not an object, or is over 64 KiB, is an error of that event; NULL adds none. Applies to outboxrelay's own routing, not the Debezium keys (use tracing_column and additional_fields there)." default:"(none)"`
}

// WithDefaults returns r with empty fields set to their defaults.
func (r Routing) WithDefaults() Routing {
	if r.TopicPrefix == "" {
		r.TopicPrefix = "outbox.event."
	}
	return r
}

// Validate checks the fixed parts of the topic name, and the pattern.
func (r Routing) Validate() error {
	var err error
	if r.Topic != "" {
		err = ValidTopic(r.Topic)
	} else {
		err = validTopicChars(r.TopicPrefix)
	}
	if r.TopicPattern != "" {
		if _, perr := compileTopicPattern(r.TopicPattern); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	return err
}

// Route turns e into the Kafka message for it: topic TopicPrefix+aggregate
// type, key the aggregate id's UTF-8 bytes, value the payload as stored,
// header `id` the event id, timestamp the commit time. A route that cannot
// be published (an illegal topic name, or one outside TopicPattern) is an
// [*EventError]. [NewRouting] routes a valid Routing (one Validate
// accepts, as every configuration loaded is) the same, faster.
func (r Routing) Route(_ context.Context, e *Event) (Message, error) {
	var allow *regexp.Regexp
	if r.TopicPattern != "" {
		var err error
		if allow, err = compileTopicPattern(r.TopicPattern); err != nil {
			return Message{}, err
		}
	}
	topic, err := r.topic(e, allow)
	if err != nil {
		return Message{}, err
	}
	return r.withHeaders(e, r.message(e, topic))
}

// topic is e's topic, checked against allow unless it is nil.
func (r Routing) topic(e *Event, allow *regexp.Regexp) (string, error) {
	topic := r.Topic
	if topic == "" {
		topic = r.TopicPrefix + e.AggregateType
		if err := ValidTopic(topic); err != nil {
			return "", &EventError{EventID: e.ID, Origin: e.Origin, Err: fmt.Errorf("aggregate type %q: %w", Shorten(e.AggregateType, maxQuotedTopic), err)}
		}
	}
	if allow != nil && !allow.MatchString(topic) {
		return "", &EventError{EventID: e.ID, Origin: e.Origin, Err: &TopicNotAllowedError{Topic: topic, Pattern: r.TopicPattern}}
	}
	return topic, nil
}

// TopicNotAllowedError is the error of an event routed to a topic outside
// routing.topic_pattern.
type TopicNotAllowedError struct {
	Topic, Pattern string
}

func (e *TopicNotAllowedError) Error() string {
	// The pattern as written, not quoted, whose backslashes would double.
	return fmt.Sprintf("topic %q is outside routing.topic_pattern `%s`; if the topic is meant, widen the pattern, else correct the row's aggregate type", Shorten(e.Topic, maxQuotedTopic), e.Pattern)
}

// compileTopicPattern compiles a TopicPattern to match whole topic names.
func compileTopicPattern(pattern string) (*regexp.Regexp, error) {
	if re, ok := topicPatterns.Load(pattern); ok {
		return re.(*regexp.Regexp), nil
	}
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return nil, fmt.Errorf("topic pattern `%s` is not a regular expression (RE2 syntax): %w", pattern, err)
	}
	topicPatterns.Store(pattern, re)
	return re, nil
}

// topicPatterns holds each pattern compiled, for [Routing.Route]. They
// come from the configuration, not from events, so they are few.
var topicPatterns sync.Map // pattern -> *regexp.Regexp

// AllowTopics returns rt refusing, as an [*EventError] with a
// [*TopicNotAllowedError], every message whose topic does not match
// pattern in full; for routers other than [NewRouting]'s, which checks
// Routing.TopicPattern itself. An empty pattern returns rt.
func AllowTopics(rt Router, pattern string) (Router, error) {
	if pattern == "" {
		return rt, nil
	}
	re, err := compileTopicPattern(pattern)
	if err != nil {
		return nil, err
	}
	return allowTopics{rt, re, pattern}, nil
}

type allowTopics struct {
	Router
	re      *regexp.Regexp
	pattern string
}

func (a allowTopics) Route(ctx context.Context, e *Event) (Message, error) {
	m, err := a.Router.Route(ctx, e)
	if err == nil && !a.re.MatchString(m.Topic) {
		return Message{}, &EventError{EventID: e.ID, Origin: e.Origin, Err: &TopicNotAllowedError{Topic: m.Topic, Pattern: a.pattern}}
	}
	return m, err
}

func (r Routing) message(e *Event, topic string) Message {
	// The key and the header values share one allocation; each slice is
	// capped so that appending to one cannot overwrite the next.
	n := len(e.AggregateID) + len(e.ID)
	if r.TypeHeader != "" {
		n += len(e.Type)
	}
	buf := make([]byte, 0, n)
	buf = append(buf, e.AggregateID...)
	buf = append(buf, e.ID...)
	key, id := buf[:len(e.AggregateID):len(e.AggregateID)], buf[len(e.AggregateID):len(buf):len(buf)]
	m := Message{
		Topic:     topic,
		Key:       key,
		Value:     e.Payload,
		Timestamp: e.CommitTime,
		EventID:   e.ID,
	}
	if r.TypeHeader != "" {
		// A NULL type is a null header, as a NULL payload is a null value.
		var typ []byte
		if !e.TypeNull {
			at := len(buf)
			buf = append(buf, e.Type...)
			typ = buf[at:len(buf):len(buf)]
		}
		m.Headers = []Header{{Key: "id", Value: id}, {Key: r.TypeHeader, Value: typ}}
	} else {
		m.Headers = []Header{{Key: "id", Value: id}}
	}
	return m
}

// cachedRouting is a Routing that makes and checks the topic of each
// aggregate type once, instead of concatenating and checking a topic name
// for every event. The runner routes through one unless given a Router;
// like the runner's publishing, it is used from one goroutine.
type cachedRouting struct {
	Routing
	allow  *regexp.Regexp    // TopicPattern, compiled; nil for none
	topics map[string]string // aggregate type -> topic
}

// maxCachedTopics bounds the cache: aggregate types are few, but they are
// input. Past the bound, topics are made per event again.
const maxCachedTopics = 1024

// newCachedRouting is r's router; r must be valid.
func newCachedRouting(r Routing) *cachedRouting {
	c := &cachedRouting{Routing: r, topics: map[string]string{}}
	if r.TopicPattern != "" {
		// A pattern that does not compile is refused by Validate; one
		// that gets here regardless allows no topic rather than all.
		var err error
		if c.allow, err = compileTopicPattern(r.TopicPattern); err != nil {
			c.allow = regexp.MustCompile(`[^\x00-\x{10FFFF}]`)
		}
	}
	return c
}

func (c *cachedRouting) Route(_ context.Context, e *Event) (Message, error) {
	topic, ok := c.topics[e.AggregateType]
	if !ok {
		var err error
		if topic, err = c.topic(e, c.allow); err != nil {
			return Message{}, err
		}
		if len(c.topics) < maxCachedTopics {
			c.topics[e.AggregateType] = topic
		}
	}
	return c.withHeaders(e, c.message(e, topic))
}

// maxQuotedTopic is how much of an illegal topic name its error quotes: the
// name comes from the row, and a 2 MB aggregate type would otherwise make a
// 2 MB error, logged and carried in the dead letter record's header.
const maxQuotedTopic = 300

// ValidTopic reports whether name is a legal Kafka topic name: 1 to 249
// characters of ASCII letters, digits, '.', '_' and '-', and not "." or "..".
func ValidTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed by Kafka", name)
	case len(name) > 249:
		return fmt.Errorf("topic name %q is %d characters long; Kafka allows 249", Shorten(name, maxQuotedTopic), len(name))
	}
	return validTopicChars(name)
}

func validTopicChars(s string) error {
	if i := strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
	}); i >= 0 {
		c, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("topic name %q has %q at byte %d; Kafka allows only ASCII letters, digits, '.', '_' and '-'", Shorten(s, maxQuotedTopic), c, i)
	}
	return nil
}

// TableRouter routes each event with the router of its outbox table
// (Event.Table), and the events of any other table with Default.
type TableRouter struct {
	Default Router
	Tables  map[string]Router
}

// Route implements [Router].
func (t TableRouter) Route(ctx context.Context, e *Event) (Message, error) {
	if r, ok := t.Tables[e.Table]; ok {
		return r.Route(ctx, e)
	}
	return t.Default.Route(ctx, e)
}

// NewRouting is the router that routes as r says (with its defaults),
// keeping each aggregate type's topic name once made. r must be valid
// ([Routing.Validate]).
func NewRouting(r Routing) Router { return newCachedRouting(r.WithDefaults()) }
