// Package tracing is the relay's OpenTelemetry tracing: a span for each
// published event that carries a trace context, child of the writer's
// span, whose context replaces the record's traceparent so that the
// consumer continues the trace through the relay. Spans are exported with
// OpenTelemetry's OTLP exporters, over HTTP or gRPC as
// OTEL_EXPORTER_OTLP_PROTOCOL says, when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set, and not made at all when it is not.
package tracing
