package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxrelay/outboxrelay/connector"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ackSink acknowledges every message at once.
type ackSink struct{ connector.Sink }

func (ackSink) Publish(_ context.Context, _ *connector.Message, done func(error)) error {
	done(nil)
	return nil
}

// BenchmarkSink is what tracing adds to each published event: nothing
// for an event without a trace context; for one with it, a span, its
// context in the record's headers, and its export over OTLP/HTTP (to a
// receiver that drops it), the batch processor's work included.
func BenchmarkSink(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(srv.URL))
	if err != nil {
		b.Fatal(err)
	}
	// Blocking: every span is exported, none dropped, so the figure is
	// the whole cost of a span rather than of a full queue.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()))
	defer tp.Shutdown(context.Background())
	s := New(tp).Sink(ackSink{})
	for _, bc := range []struct {
		name    string
		headers []connector.Header
	}{
		{"without trace context", []connector.Header{{Key: "id", Value: []byte("0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d")}}},
		{"traced", []connector.Header{{Key: "id", Value: []byte("0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d")}, {Key: "traceparent", Value: []byte(writerTP)}}},
		// The writer's sampler said no: the relay's span records nothing.
		{"traced, not sampled", []connector.Header{{Key: "id", Value: []byte("0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d")}, {Key: "traceparent", Value: []byte(writerTP[:len(writerTP)-2] + "00")}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := connector.Message{Topic: "outbox.event.order", Key: []byte("42"), EventID: "0192f0c4-5d6e-7a8b-9c0d-1e2f3a4b5c6d", Headers: bc.headers}
			b.ReportAllocs()
			before := cpuTime()
			for b.Loop() {
				if err := s.Publish(b.Context(), &m, func(error) {}); err != nil {
					b.Fatal(err)
				}
			}
			if err := tp.ForceFlush(b.Context()); err != nil {
				b.Fatal(err)
			}
			// The process's CPU time, the exporter's goroutines included:
			// on a busy machine ns/op counts the waits for the export too.
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}
