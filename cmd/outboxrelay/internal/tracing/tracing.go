package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is the relay's tracer and the exporter behind it.
type Tracing struct {
	tracer   trace.Tracer
	provider *sdktrace.TracerProvider
}

// FromEnv sets tracing up as the standard OTEL_ variables say, read
// through getenv: nil, and no error, when none asks for it (no OTLP
// endpoint, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none). The
// exporter reads the other OTEL_EXPORTER_OTLP_ variables (headers,
// timeout, TLS, compression) through getenv too, and a value it cannot
// use is an error naming the variable; the provider reads
// OTEL_TRACES_SAMPLER and OTEL_BSP_*, the resource OTEL_SERVICE_NAME
// (default outboxrelay) and OTEL_RESOURCE_ATTRIBUTES, from the process's
// environment. Export errors, and spans a collector rejected, go to log.
func FromEnv(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (*Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return nil, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the relay exports traces over otlp only; set otlp, or none for no traces", exp)
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	for _, key := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(key)); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: the relay exports OTLP over http/protobuf only; set http/protobuf and point the endpoint at the collector's OTLP/HTTP port (4318 by default)", key, p)
			}
			break // the traces protocol overrides the general one
		}
	}
	client, err := newOTLPClient(getenv, version)
	if err != nil {
		return nil, err // names the variables
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "outboxrelay"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the above
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry: spans may be lost", "component", "tracing", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tracer: tp.Tracer("github.com/outboxrelay/outboxrelay"), provider: tp}, nil
}

// New is tracing through the spans of tp, for tests and benchmarks.
func New(tp trace.TracerProvider) *Tracing {
	return &Tracing{tracer: tp.Tracer("github.com/outboxrelay/outboxrelay")}
}

// Shutdown exports the spans not yet exported, until ctx is done.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("export the last spans: %w", err)
	}
	return nil
}

// propagator reads and writes the record's traceparent and tracestate.
var propagator = propagation.TraceContext{}
