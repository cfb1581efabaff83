package debezium

import (
	"fmt"
	"regexp"
)

// traceparent is the W3C Trace Context header: version 00, a trace id and
// a parent span id (neither all zeros) and flags.
var traceparent = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$`)

// spanContext reads the tracing column: a java.util.Properties text with a
// W3C traceparent (and maybe tracestate), as an application that uses
// OpenTelemetry's Properties propagation writes it. It returns the headers
// to send, in order.
func spanContext(text []byte) ([]headerValue, error) {
	props, err := ParseProperties(text)
	if err != nil {
		return nil, fmt.Errorf("span context: %w", err)
	}
	tp, ok := props.Get("traceparent")
	if !ok {
		return nil, fmt.Errorf("span context has no traceparent entry")
	}
	m := traceparent.FindStringSubmatch(tp)
	if m == nil || m[1] == "00000000000000000000000000000000" || m[2] == "0000000000000000" {
		return nil, fmt.Errorf("span context traceparent %q is not a valid W3C traceparent", tp)
	}
	out := []headerValue{{key: "traceparent", value: tp}}
	if ts, ok := props.Get("tracestate"); ok && ts != "" {
		out = append(out, headerValue{key: "tracestate", value: ts})
	}
	return out, nil
}

// headerValue is a string header before conversion.
type headerValue struct {
	key, value string
}
