package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is the relay's tracer and the exporter behind it.
type Tracing struct {
	tracer   trace.Tracer
	provider *sdktrace.TracerProvider
	protocol string
}

// The values of OTEL_EXPORTER_OTLP_PROTOCOL: the HTTP exporter sends
// protobuf or JSON as the variable says, the gRPC one protobuf.
const (
	protocolHTTP     = "http/protobuf"
	protocolHTTPJSON = "http/json"
	protocolGRPC     = "grpc"
)

// FromEnv sets tracing up as the standard OTEL_ variables of the process
// say: nil, and no error, when none asks for it (no OTLP endpoint,
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none).
// OTEL_EXPORTER_OTLP_PROTOCOL (or its _TRACES_ form) chooses
// OpenTelemetry's OTLP/HTTP exporter (http/protobuf, the default, or
// http/json) or its OTLP/gRPC one (grpc); the exporter reads the other
// OTEL_EXPORTER_OTLP_ variables itself (endpoint, headers, timeout,
// compression, certificates, insecure), the provider OTEL_TRACES_SAMPLER
// and OTEL_BSP_*, the resource OTEL_SERVICE_NAME (default outboxrelay) and
// OTEL_RESOURCE_ATTRIBUTES. What the SDK reports, a variable it could not
// use or an export that failed, goes to log.
func FromEnv(ctx context.Context, version string, log *slog.Logger) (*Tracing, error) {
	protocol, on, err := fromEnv(os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	// The SDK's diagnostics (a value it ignores, a dropped span) and its
	// export errors, in the relay's log rather than on stderr.
	otel.SetLogger(logr.FromSlogHandler(log.With("component", "tracing").Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry: spans may be lost", "component", "tracing", "err", err)
	}))
	var exp *otlptrace.Exporter
	if protocol == protocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (%s): %w", protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "outboxrelay"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the above
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("trace resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tracer: tp.Tracer("github.com/outboxrelay/outboxrelay"), provider: tp, protocol: protocol}, nil
}

// fromEnv reads through getenv whether tracing is on and over which OTLP
// protocol. A value the relay cannot export with is an error naming the
// variable.
func fromEnv(getenv func(string) string) (protocol string, on bool, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return "", false, nil
	case "", "otlp":
	default:
		return "", false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the relay exports traces over otlp only; set otlp, or none for no traces", exp)
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return "", false, nil
	}
	protocol = protocolHTTP
	// The traces protocol overrides the general one.
	for _, key := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		p := strings.TrimSpace(getenv(key))
		if p == "" {
			continue
		}
		if p != protocolHTTP && p != protocolHTTPJSON && p != protocolGRPC {
			return "", false, fmt.Errorf("%s=%q: the relay exports OTLP over http/protobuf or http/json (the collector's port 4318 by default), or grpc (4317)", key, p)
		}
		protocol = p
		break
	}
	return protocol, true, nil
}

// Protocol is the OTLP protocol spans are exported with: http/protobuf,
// http/json or grpc.
func (t *Tracing) Protocol() string { return t.protocol }

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
