package debezium

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// compileRegexRouter is RegexRouter (connect/transforms/.../RegexRouter.
// java): a topic the regex matches whole becomes replaceFirst of it with
// the replacement; any other topic stays.
func compileRegexRouter(o transformOptions) (transformFunc, error) {
	regex, err := o.required("regex")
	if err != nil {
		return nil, err
	}
	repl, err := o.required("replacement")
	if err != nil {
		return nil, err
	}
	tr, err := newRegexRouter("regex", regex, "replacement", repl)
	if err != nil {
		return nil, err
	}
	return func(rec *connectRecord) (*connectRecord, error) {
		out := *rec
		out.topic = tr.route(rec.topic)
		return &out, nil
	}, nil
}

// compileTimestampRouter is TimestampRouter: topic.format (default
// ${topic}-${timestamp}) with ${topic} replaced by the topic and
// ${timestamp} by the record's timestamp written with timestamp.format
// (default yyyyMMdd), a java.text.SimpleDateFormat pattern, in UTC.
func compileTimestampRouter(o transformOptions) (transformFunc, error) {
	topicFormat, ok := o.get("topic.format")
	if !ok {
		topicFormat = "${topic}-${timestamp}"
	}
	pattern, ok := o.get("timestamp.format")
	if !ok {
		pattern = "yyyyMMdd"
	}
	format, err := parseSimpleDateFormat(pattern)
	if err != nil {
		return nil, fmt.Errorf("option timestamp.format: %w", err)
	}
	return func(rec *connectRecord) (*connectRecord, error) {
		ts := format.format(rec.millis())
		// Both replacements are literal (Pattern.LITERAL and
		// Matcher.quoteReplacement), the topic's first.
		topic := strings.ReplaceAll(topicFormat, "${topic}", rec.topic)
		out := *rec
		out.topic = strings.ReplaceAll(topic, "${timestamp}", ts)
		return &out, nil
	}, nil
}

// compileFilter is Filter: it drops every record it applies to, which its
// predicate chooses.
func compileFilter(transformOptions) (transformFunc, error) {
	return func(*connectRecord) (*connectRecord, error) { return nil, nil }, nil
}

// compileInsertHeader is InsertHeader: the header, with the value
// Values.parseString gives value.literal, added after the others.
func compileInsertHeader(o transformOptions) (transformFunc, error) {
	name, err := o.required("header")
	if err != nil {
		return nil, err
	}
	literal, err := o.required("value.literal")
	if err != nil {
		return nil, err
	}
	s, v, err := parseConnectLiteral(literal)
	if err != nil {
		return nil, fmt.Errorf("option value.literal: %w", err)
	}
	return func(rec *connectRecord) (*connectRecord, error) {
		out := *rec
		out.headers = append(slices.Clip(rec.headers), connectHeader{key: name, schema: s, value: v, label: "header " + name})
		return &out, nil
	}, nil
}

// compileDropHeaders is DropHeaders: every header of one of the names is
// removed, the others kept in order.
func compileDropHeaders(o transformOptions) (transformFunc, error) {
	names := o.list("headers")
	if len(names) == 0 {
		return nil, errors.New("option headers must name at least one header")
	}
	return func(rec *connectRecord) (*connectRecord, error) {
		out := *rec
		out.headers = nil
		for _, h := range rec.headers {
			if !slices.Contains(names, h.key) {
				out.headers = append(out.headers, h)
			}
		}
		return &out, nil
	}, nil
}

// compileTopicNameMatches is TopicNameMatches: the pattern, a Java regex,
// matches the whole topic.
func compileTopicNameMatches(o transformOptions) (predicateFunc, error) {
	pattern, err := o.required("pattern")
	if err != nil {
		return nil, err
	}
	if pattern == "" {
		return nil, errors.New("option pattern must not be empty")
	}
	re, err := regexp.Compile(`\A(?:` + pattern + `)\z`)
	if err != nil {
		return nil, fmt.Errorf("option pattern %q: %w (Java regex features that Go's RE2 lacks, such as lookaround and backreferences, are not supported)", pattern, err)
	}
	return func(rec *connectRecord) bool { return re.MatchString(rec.topic) }, nil
}

// compileHasHeaderKey is HasHeaderKey: the record has a header of the
// name.
func compileHasHeaderKey(o transformOptions) (predicateFunc, error) {
	name, err := o.required("name")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("option name must not be empty")
	}
	return func(rec *connectRecord) bool {
		return slices.ContainsFunc(rec.headers, func(h connectHeader) bool { return h.key == name })
	}, nil
}

// compileRecordIsTombstone is RecordIsTombstone: the value is null
// (record.value() == null), whatever its schema.
func compileRecordIsTombstone(transformOptions) (predicateFunc, error) {
	return func(rec *connectRecord) bool {
		if rec.value.isRaw {
			return rec.value.raw == nil
		}
		return rec.value.value == nil
	}, nil
}
