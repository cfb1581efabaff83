package debezium

import (
	"bytes"
	"fmt"
	"regexp"

	"github.com/outboxrelay/outboxrelay/connector"
)

// traceparent is the W3C Trace Context header: version 00, a trace id and
// a parent span id (neither all zeros) and flags.
var traceparent = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$`)

// spanContext reads the tracing column, in whichever of three forms the
// writer used: a java.util.Properties text with a W3C traceparent (and
// maybe tracestate), as OpenTelemetry's Properties propagation in
// Debezium's Quarkus extension writes it; a bare traceparent, as a writer
// that stores only that does; or a JSON object of headers holding them,
// as the outbox package and Go writers with a metadata map write it. It
// returns the headers to send, in order.
func spanContext(text []byte) ([]headerValue, error) {
	var tp, ts string
	var hasTP bool
	switch trimmed := bytes.TrimSpace(text); {
	case traceparent.Match(trimmed):
		tp, hasTP = string(trimmed), true
	case len(trimmed) > 0 && trimmed[0] == '{':
		hs, err := connector.HeadersFromJSON(trimmed)
		if err != nil {
			return nil, fmt.Errorf("span context: %w", err)
		}
		for _, h := range hs {
			switch h.Key {
			case "traceparent":
				tp, hasTP = string(h.Value), true
			case "tracestate":
				ts = string(h.Value)
			}
		}
	default:
		props, err := ParseProperties(text)
		if err != nil {
			return nil, fmt.Errorf("span context: %w", err)
		}
		tp, hasTP = props.Get("traceparent")
		ts, _ = props.Get("tracestate")
	}
	if !hasTP {
		return nil, fmt.Errorf("span context has no traceparent entry")
	}
	m := traceparent.FindStringSubmatch(tp)
	if m == nil || m[1] == "00000000000000000000000000000000" || m[2] == "0000000000000000" {
		return nil, fmt.Errorf("span context traceparent %q is not a valid W3C traceparent", connector.Shorten(tp, 100))
	}
	out := []headerValue{{key: "traceparent", value: tp}}
	if ts != "" {
		out = append(out, headerValue{key: "tracestate", value: ts})
	}
	return out, nil
}

// headerValue is a string header before conversion.
type headerValue struct {
	key, value string
}
