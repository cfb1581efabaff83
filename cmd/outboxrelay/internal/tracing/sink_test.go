package tracing

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/connector"
)

// fakeSink records what it was handed and keeps the done callbacks.
type fakeSink struct {
	connector.Sink
	published []connector.Message
	dones     []func(error)
	err       error
}

func (f *fakeSink) Publish(_ context.Context, m *connector.Message, done func(error)) error {
	if f.err != nil {
		return f.err
	}
	c := *m
	f.published = append(f.published, c)
	f.dones = append(f.dones, done)
	return nil
}

const writerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestSinkSpanIsTheWritersChildAndTheRecordsParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	f := &fakeSink{}
	s := tr.Sink(f)
	for _, tc := range []struct {
		name  string
		err   error
		ackOK bool
	}{{"acknowledged", nil, true}, {"refused by Kafka", errors.New("broker said no"), false}} {
		t.Run(tc.name, func(t *testing.T) {
			f.published, f.dones = nil, nil
			before := len(rec.Ended())
			orig := []connector.Header{{Key: "id", Value: []byte("e1")}, {Key: "traceparent", Value: []byte(writerTP)}, {Key: "tenant", Value: []byte("a")}}
			m := connector.Message{Topic: "outbox.event.order", Key: []byte("42"), EventID: "e1", Headers: orig}
			var got []error
			if err := s.Publish(t.Context(), &m, func(err error) { got = append(got, err) }); err != nil {
				t.Fatal(err)
			}
			if string(orig[1].Value) != writerTP {
				t.Errorf("the runner's headers were changed: %q", orig[1].Value)
			}
			if len(rec.Ended()) != before {
				t.Fatal("span ended before Kafka acknowledged")
			}
			f.dones[0](tc.err)
			if len(got) != 1 || !errors.Is(got[0], tc.err) {
				t.Fatalf("done got %v, want [%v]", got, tc.err)
			}
			ended := rec.Ended()
			if len(ended) != before+1 {
				t.Fatalf("%d spans ended, want 1", len(ended)-before)
			}
			span := ended[len(ended)-1]
			if span.Name() != "send outbox.event.order" || span.SpanKind() != trace.SpanKindProducer {
				t.Errorf("span %q kind %v", span.Name(), span.SpanKind())
			}
			if span.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || span.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("span trace %s parent %s, want the writer's", span.SpanContext().TraceID(), span.Parent().SpanID())
			}
			if tc.ackOK != (span.Status().Code != codes.Error) {
				t.Errorf("status %v for %v", span.Status(), tc.err)
			}
			hs := f.published[0].Headers
			want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span.SpanContext().SpanID().String() + "-01"
			if len(hs) != 3 || string(hs[1].Value) != want || hs[0].Key != "id" || hs[2].Key != "tenant" {
				t.Errorf("record headers %q, want the traceparent %s in place of the writer's", hs, want)
			}
		})
	}
}

func TestSinkPassesMessagesWithoutTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	f := &fakeSink{}
	for _, hs := range [][]connector.Header{
		{{Key: "id", Value: []byte("e1")}},
		{{Key: "id", Value: []byte("e1")}, {Key: "traceparent", Value: []byte("not one")}},
	} {
		m := connector.Message{Topic: "t", Headers: hs}
		if err := tr.Sink(f).Publish(t.Context(), &m, func(error) {}); err != nil {
			t.Fatal(err)
		}
		f.dones[len(f.dones)-1](nil)
		if got := f.published[len(f.published)-1].Headers; len(got) != len(hs) || string(got[len(got)-1].Value) != string(hs[len(hs)-1].Value) {
			t.Errorf("headers %q became %q", hs, got)
		}
	}
	if n := len(rec.Started()); n != 0 {
		t.Errorf("%d spans for messages without a trace context, want none", n)
	}
}

func TestSinkEndsTheSpanOfAMessageNotSent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	f := &fakeSink{err: errors.New("too large")}
	m := connector.Message{Topic: "t", Headers: []connector.Header{{Key: "traceparent", Value: []byte(writerTP)}}}
	if err := tr.Sink(f).Publish(t.Context(), &m, func(error) { t.Error("done called for a message not sent") }); err == nil {
		t.Fatal("no error")
	}
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Status().Code != codes.Error {
		t.Errorf("ended spans %v, want one with an error", ended)
	}
}

// fromEnv turns tracing on with an OTLP endpoint, over the protocol the
// variables name, and off when the SDK or the exporter is turned off.
func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		protocol string // "": off
		wantErr  string
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, protocol: "http/protobuf"},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, protocol: "http/protobuf"},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "exporter otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "otlp"}, protocol: "http/protobuf"},
		{name: "exporter zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin": the relay exports traces over otlp only`},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, protocol: "grpc"},
		{name: "traces protocol overrides", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, protocol: "http/protobuf"},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, protocol: "http/json"},
		{name: "http/thrift", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/thrift"},
			wantErr: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/thrift": the relay exports OTLP over http/protobuf or http/json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			protocol, on, err := fromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if on != (tc.protocol != "") || protocol != tc.protocol {
				t.Errorf("on %v over %q, want %q", on, protocol, tc.protocol)
			}
		})
	}
}

// FromEnv with nothing set makes no tracing, which passes messages
// through.
func TestFromEnvOff(t *testing.T) {
	setOTELEnv(t, nil)
	tr, err := FromEnv(t.Context(), "test", slog.New(slog.DiscardHandler))
	if err != nil || tr != nil {
		t.Fatalf("FromEnv = %v, %v; want nil, nil", tr, err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Error(err)
	}
	if s := (ackSink{}); tr.Sink(s) != connector.Sink(s) {
		t.Error("a nil Tracing wraps the sink")
	}
}
