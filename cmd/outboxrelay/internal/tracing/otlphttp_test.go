package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/connector"
)

// received is one request an otlpReceiver got.
type received struct {
	at      time.Time
	path    string
	header  http.Header
	raw     []byte // the body as sent, gzip undone
	client  bool   // a TLS client certificate came with it
	request *coltracepb.ExportTraceServiceRequest
}

// otlpReceiver is an OTLP/HTTP collector: it decodes each request with
// the collector's own protobuf types and answers with answer (200 and an
// empty ExportTraceServiceResponse when nil).
type otlpReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, w http.ResponseWriter) bool // true: answered
}

func newOTLPReceiver(t *testing.T, tlsServer bool, answer func(n int, w http.ResponseWriter) bool) *otlpReceiver {
	r := &otlpReceiver{answer: answer}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				t.Errorf("receiver: gzip: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			t.Errorf("receiver: read: %v", err)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &export); err != nil {
			t.Errorf("receiver: the body is not an ExportTraceServiceRequest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		n := len(r.got)
		r.got = append(r.got, received{at: time.Now(), path: req.URL.Path, header: req.Header.Clone(), raw: raw, request: &export,
			client: req.TLS != nil && len(req.TLS.PeerCertificates) > 0})
		r.mu.Unlock()
		if r.answer != nil && r.answer(n, w) {
			return
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	if tlsServer {
		r.Server = httptest.NewUnstartedServer(h)
		r.Server.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
		r.Server.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted case's handshake error
		r.StartTLS()
	} else {
		r.Server = httptest.NewServer(h)
	}
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// env is a getenv over m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// The relay's span, made and exported as the relay does it (FromEnv,
// Sink, Shutdown), reaches an OTLP/HTTP collector whole.
func TestOTLPExportThroughFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name, compression, wantEncoding string
	}{
		{"uncompressed", "", ""},
		{"none", "none", ""},
		{"gzip", "gzip", "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newOTLPReceiver(t, false, nil)
			tr, err := FromEnv(t.Context(), env(map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":    rcv.URL,
				"OTEL_EXPORTER_OTLP_HEADERS":     "api-key=s%3Dcret%20token, X-Tenant = acme ,",
				"OTEL_EXPORTER_OTLP_COMPRESSION": tc.compression,
			}), "1.2.3", slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			m := connector.Message{Topic: "outbox.event.order", Key: []byte("42"), EventID: "e1",
				Headers: []connector.Header{{Key: "traceparent", Value: []byte(writerTP)}}}
			if err := tr.Sink(ackSink{}).Publish(t.Context(), &m, func(error) {}); err != nil {
				t.Fatal(err)
			}
			if err := tr.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := rcv.requests()
			if len(got) != 1 {
				t.Fatalf("the collector got %d requests, want 1", len(got))
			}
			r := got[0]
			if r.path != "/v1/traces" {
				t.Errorf("path %q, want /v1/traces", r.path)
			}
			for k, want := range map[string]string{
				"Content-Type": "application/x-protobuf", "Content-Encoding": tc.wantEncoding,
				"Api-Key": "s=cret token", "X-Tenant": "acme",
			} {
				if v := r.header.Get(k); v != want {
					t.Errorf("header %s = %q, want %q", k, v, want)
				}
			}
			if len(r.request.ResourceSpans) != 1 || len(r.request.ResourceSpans[0].ScopeSpans) != 1 {
				t.Fatalf("request %v, want one resource with one scope", r.request)
			}
			rs := r.request.ResourceSpans[0]
			if v := attr(rs.Resource.Attributes, "service.version"); v != "1.2.3" {
				t.Errorf("service.version %q, want 1.2.3", v)
			}
			if v := attr(rs.Resource.Attributes, "service.name"); v == "" {
				t.Error("no service.name in the resource")
			}
			ss := rs.ScopeSpans[0]
			if ss.Scope.GetName() != "github.com/outboxrelay/outboxrelay" || len(ss.Spans) != 1 {
				t.Fatalf("scope %q with %d spans, want the relay's with 1", ss.Scope.GetName(), len(ss.Spans))
			}
			span := ss.Spans[0]
			if span.Name != "send outbox.event.order" || span.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
				t.Errorf("span %q kind %v", span.Name, span.Kind)
			}
			if tid := trace.TraceID(span.TraceId); tid.String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("trace id %s, want the writer's", tid)
			}
			if pid := trace.SpanID(span.ParentSpanId); pid.String() != "00f067aa0ba902b7" {
				t.Errorf("parent %s, want the writer's span", pid)
			}
			for k, want := range map[string]string{"messaging.destination.name": "outbox.event.order", "messaging.message.id": "e1", "messaging.kafka.message.key": "42"} {
				if v := attr(span.Attributes, k); v != want {
					t.Errorf("span attribute %s = %q, want %q", k, v, want)
				}
			}
		})
	}
}

// recordedSpans are spans of two resources and two scopes, with what a
// span may carry: attributes of each type, events, links, a status.
func recordedSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	for i, svc := range []string{"outboxrelay", "other"} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", svc), attribute.Int("n", i))))
		for _, scope := range []string{"a", "b"} {
			tr := tp.Tracer(scope, trace.WithInstrumentationVersion("v1"))
			ctx, parent := tr.Start(t.Context(), "parent", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tr.Start(ctx, "child "+scope, trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithLinks(trace.Link{SpanContext: parent.SpanContext(), Attributes: []attribute.KeyValue{attribute.Bool("l", true)}}),
				trace.WithAttributes(attribute.String("s", "é"), attribute.Int64("i", -7), attribute.Float64("f", 1.5),
					attribute.Bool("b", true), attribute.StringSlice("ss", []string{"x", "y"}), attribute.Int64Slice("is", []int64{1, 2})))
			child.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", 2)))
			child.RecordError(errors.New("broker said no"))
			child.SetStatus(codes.Error, "broker said no")
			child.End()
			parent.End()
		}
	}
	return rec.Ended()
}

// The same spans exported through otlptracehttp and through ours reach
// the collector as equal requests, and ours encodes a request in the
// bytes proto.Marshal makes of the collector's request type.
func TestOTLPClientMatchesOTLPTraceHTTP(t *testing.T) {
	spans := recordedSpans(t)
	sdk, ours := newOTLPReceiver(t, false, nil), newOTLPReceiver(t, false, nil)

	sdkExp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(sdk.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := newOTLPClient(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ours.URL}), "test")
	if err != nil {
		t.Fatal(err)
	}
	ourExp, err := otlptrace.New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, exp := range []sdktrace.SpanExporter{sdkExp, ourExp} {
		if err := exp.ExportSpans(t.Context(), spans); err != nil {
			t.Fatal(err)
		}
		if err := exp.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	a, b := sdk.requests(), ours.requests()
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("requests: otlptracehttp %d, ours %d; want 1 each", len(a), len(b))
	}
	if n := len(a[0].request.ResourceSpans); n != 2 {
		t.Fatalf("otlptracehttp sent %d resources, want 2", n)
	}
	// otlptrace groups the spans by resource and scope through maps:
	// their order is each export's own.
	for _, r := range []*coltracepb.ExportTraceServiceRequest{a[0].request, b[0].request} {
		slices.SortFunc(r.ResourceSpans, func(x, y *tracepb.ResourceSpans) int {
			return strings.Compare(attr(x.Resource.Attributes, "service.name"), attr(y.Resource.Attributes, "service.name"))
		})
		for _, rs := range r.ResourceSpans {
			slices.SortFunc(rs.ScopeSpans, func(x, y *tracepb.ScopeSpans) int { return strings.Compare(x.Scope.Name, y.Scope.Name) })
		}
	}
	if !proto.Equal(a[0].request, b[0].request) {
		t.Errorf("the requests differ:\notlptracehttp: %v\nours:          %v", a[0].request, b[0].request)
	}
	// And the same resources make the same bytes as proto.Marshal of the
	// collector's request type, as otlptracehttp sends them.
	want, err := proto.Marshal(a[0].request)
	if err != nil {
		t.Fatal(err)
	}
	got, err := exportRequest(a[0].request.ResourceSpans)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("exportRequest made %d bytes unlike proto.Marshal's %d", len(got), len(want))
	}
	if a[0].path != b[0].path || a[0].header.Get("Content-Type") != b[0].header.Get("Content-Type") {
		t.Errorf("path %q and %q, content type %q and %q", a[0].path, b[0].path, a[0].header.Get("Content-Type"), b[0].header.Get("Content-Type"))
	}
}

// someSpans is one resource's spans, in the form UploadTraces takes.
func someSpans() []*tracepb.ResourceSpans {
	return []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: "send t",
	}}}}}}
}

func TestOTLPClientRetries(t *testing.T) {
	unavailable := func(retryAfter func() string) func(n int, w http.ResponseWriter) bool {
		return func(n int, w http.ResponseWriter) bool {
			if n > 0 {
				return false
			}
			w.Header().Set("Retry-After", retryAfter())
			http.Error(w, "collector starting", http.StatusServiceUnavailable)
			return true
		}
	}
	for _, tc := range []struct {
		name         string
		answer       func(n int, w http.ResponseWriter) bool
		timeout      time.Duration // of the export's context; 0: none
		wantRequests int
		wantErr      string
		wantWait     time.Duration // at least, between the first two requests
	}{
		{name: "503 with Retry-After", answer: unavailable(func() string { return "1" }), wantRequests: 2, wantWait: time.Second},
		// The date is taken when the collector answers, not when the table
		// is built: the cases before it take their seconds.
		{name: "503 with a Retry-After date", answer: unavailable(func() string { return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat) }), wantRequests: 2, wantWait: time.Second},
		{name: "429 without Retry-After", answer: func(n int, w http.ResponseWriter) bool {
			if n < 2 {
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return true
			}
			return false
		}, wantRequests: 3},
		{name: "400 is not retried", answer: func(_ int, w http.ResponseWriter) bool {
			http.Error(w, "bad spans", http.StatusBadRequest)
			return true
		}, wantRequests: 1, wantErr: "400 Bad Request (body: bad spans)"},
		{name: "retries end with the export's context", answer: func(_ int, w http.ResponseWriter) bool {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "still starting", http.StatusBadGateway)
			return true
		}, timeout: 200 * time.Millisecond, wantRequests: 1, wantErr: "context deadline exceeded: send spans"},
		{name: "a Retry-After beyond the time retries may take", answer: unavailable(func() string { return "9223372036854" }),
			wantRequests: 1, wantErr: "gave up retrying after"},
		{name: "partial success", answer: func(_ int, w http.ResponseWriter) bool {
			out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 2, ErrorMessage: "too old"}})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
			return true
		}, wantRequests: 1, wantErr: "OTLP partial success: too old (2 spans rejected)"},
		{name: "an answer that is not an ExportTraceServiceResponse", answer: func(_ int, w http.ResponseWriter) bool {
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write([]byte{0x0a, 0x05, 0x08}) // field 1 says 5 bytes, 1 follows
			return true
		}, wantRequests: 1, wantErr: "the collector's answer is not an ExportTraceServiceResponse"},
		{name: "an answer in another content type", answer: func(_ int, w http.ResponseWriter) bool {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok"))
			return true
		}, wantRequests: 1},
		{name: "partial success that rejected nothing", answer: func(_ int, w http.ResponseWriter) bool {
			out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{}})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
			return true
		}, wantRequests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newOTLPReceiver(t, false, tc.answer)
			c, err := newOTLPClient(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL + "/v1/traces"}), "test")
			if err != nil {
				t.Fatal(err)
			}
			// Shorter than the default 5 s, so that the wait a test sees
			// is Retry-After's.
			c.retry.initial, c.retry.max = 10*time.Millisecond, 100*time.Millisecond
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			err = c.UploadTraces(ctx, someSpans())
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
			}
			got := rcv.requests()
			if len(got) != tc.wantRequests {
				t.Fatalf("the collector got %d requests, want %d", len(got), tc.wantRequests)
			}
			for _, r := range got[1:] {
				if !bytes.Equal(r.raw, got[0].raw) {
					t.Error("a retry sent another body")
				}
			}
			if tc.wantWait > 0 {
				if wait := got[1].at.Sub(got[0].at); wait < tc.wantWait-50*time.Millisecond {
					t.Errorf("retried after %s, before the %s Retry-After asked", wait, tc.wantWait)
				}
			}
		})
	}
}

// Stop ends an export in flight, as the exporter's Shutdown asks.
func TestOTLPClientStopEndsExports(t *testing.T) {
	release := make(chan struct{})
	rcv := newOTLPReceiver(t, false, func(int, http.ResponseWriter) bool {
		<-release // a collector that does not answer
		return false
	})
	defer close(release)
	c, err := newOTLPClient(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}), "test")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.UploadTraces(context.Background(), someSpans()) }()
	for len(rcv.requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want the export canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the export goes on after Stop")
	}
}

// A partial success reaches the relay's log through the error handler
// FromEnv sets, as the SDK's exporter's does.
func TestOTLPPartialSuccessIsLogged(t *testing.T) {
	rcv := newOTLPReceiver(t, false, func(_ int, w http.ResponseWriter) bool {
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 1, ErrorMessage: "span too large"}})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
		return true
	})
	var logged bytes.Buffer
	var mu sync.Mutex
	tr, err := FromEnv(t.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}), "test",
		slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m := connector.Message{Topic: "t", EventID: "e1", Headers: []connector.Header{{Key: "traceparent", Value: []byte(writerTP)}}}
	if err := tr.Sink(ackSink{}).Publish(t.Context(), &m, func(error) {}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := logged.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "span too large (1 spans rejected)") {
		t.Errorf("log %q, want a warning with the collector's message", s)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// writePEM writes blocks of typ to a new file under dir.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clientCert writes a self-signed client certificate and its key.
func clientCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	tmpl.Subject.CommonName = "outboxrelay-test"
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, "client.pem", "CERTIFICATE", der), writePEM(t, dir, "client-key.pem", "EC PRIVATE KEY", keyDER)
}

// An https collector is trusted through _CERTIFICATE, and sees the
// client certificate of _CLIENT_CERTIFICATE and _CLIENT_KEY.
func TestOTLPClientTLS(t *testing.T) {
	rcv := newOTLPReceiver(t, true, nil)
	dir := t.TempDir()
	ca := writePEM(t, dir, "ca.pem", "CERTIFICATE", rcv.Certificate().Raw)
	cert, key := clientCert(t, dir)
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantErr    string
		wantClient bool
	}{
		{name: "collector's CA", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca}},
		{name: "traces CA wins", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ca, "OTEL_EXPORTER_OTLP_CERTIFICATE": cert}},
		{name: "client certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": cert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": key}, wantClient: true},
		{name: "traces client certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ca, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": cert, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": key}, wantClient: true},
		{name: "collector not trusted", env: map[string]string{}, wantErr: "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = rcv.URL
			c, err := newOTLPClient(env(tc.env), "test")
			if err != nil {
				t.Fatal(err)
			}
			before := len(rcv.requests())
			err = c.UploadTraces(t.Context(), someSpans())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := rcv.requests()
			if len(got) != before+1 {
				t.Fatalf("the collector got %d requests, want 1", len(got)-before)
			}
			if c := got[len(got)-1].client; c != tc.wantClient {
				t.Errorf("client certificate sent: %v, want %v", c, tc.wantClient)
			}
		})
	}
}

// Every variable the exporter reads, and what it makes of it; a value it
// cannot use stops the start with the variable and the value named.
func TestOTLPClientFromEnv(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := clientCert(t, dir)
	const base = "http://collector:4318"
	for _, tc := range []struct {
		name        string
		env         map[string]string
		wantURL     string
		wantHeaders map[string]string
		wantTimeout time.Duration
		wantGzip    bool
		wantErr     []string
	}{
		{name: "defaults", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base},
			wantURL: base + "/v1/traces", wantTimeout: 10 * time.Second},
		{name: "endpoint with a path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector/otlp/?x=1"},
			wantURL: "https://collector/otlp/v1/traces", wantTimeout: 10 * time.Second},
		{name: "traces endpoint as it is, and it wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/custom"},
			wantURL: "http://other:4318/custom", wantTimeout: 10 * time.Second},
		{name: "traces endpoint without a path", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "HTTP://other:4318"},
			wantURL: "http://other:4318/", wantTimeout: 10 * time.Second},
		{name: "timeout, headers, compression", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base,
			"OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=x%2Cy", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
			wantURL: base + "/v1/traces", wantTimeout: 2500 * time.Millisecond, wantHeaders: map[string]string{"a": "1", "b": "x,y"}, wantGzip: true},
		{name: "the traces variables win", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base,
			"OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "0",
			"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2",
			"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none"},
			wantURL: base + "/v1/traces", wantTimeout: 0, wantHeaders: map[string]string{"b": "2"}},
		{name: "insecure agreeing with the scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_EXPORTER_OTLP_INSECURE": "true"},
			wantURL: base + "/v1/traces", wantTimeout: 10 * time.Second},

		{name: "endpoint without scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
			wantErr: []string{`OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": want the collector's OTLP/HTTP URL`}},
		{name: "endpoint with credentials, not shown", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://user:s3cr3t@collector:4318"},
			wantErr: []string{`OTEL_EXPORTER_OTLP_ENDPOINT=`, `want the collector's OTLP/HTTP URL`}},
		{name: "traces endpoint not a URL", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[::1"},
			wantErr: []string{`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://[::1"`}},
		{name: "every bad value at once", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector",
			"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
			"OTEL_EXPORTER_OTLP_HEADERS":     "Authorization=Bearer%20s3cr3t,Bearer-only-s3cr3t,bad key=1,c=%zzs3cr3t",
			"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "missing.pem"), "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": garbage, "OTEL_EXPORTER_OTLP_CLIENT_KEY": key,
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": key},
			wantErr: []string{
				`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="10s": want the export timeout in whole milliseconds`,
				`OTEL_EXPORTER_OTLP_COMPRESSION="zstd": want gzip or none`,
				`OTEL_EXPORTER_OTLP_HEADERS: item 2 has no '='`,
				`OTEL_EXPORTER_OTLP_HEADERS: "bad key" is not a valid HTTP header name`,
				`OTEL_EXPORTER_OTLP_HEADERS: the value of c is not URL-encoded`,
				`OTEL_EXPORTER_OTLP_CERTIFICATE: open ` + filepath.Join(dir, "missing.pem") + `: no such file or directory`,
				`OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE="" and OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY="` + key + `": set both, or neither`,
				`OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY: not a certificate and its key in PEM`,
			}},
		{name: "certificate without PEM", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": garbage},
			wantErr: []string{`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: ` + garbage + ` holds no PEM certificate`}},
		{name: "TLS on a plain http endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": cert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": key},
			wantErr: []string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY set, but the trace endpoint http://collector:4318/v1/traces is plain http"}},
		{name: "insecure against the scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true"},
			wantErr: []string{`OTEL_EXPORTER_OTLP_TRACES_INSECURE="true", but the trace endpoint is https://collector/v1/traces`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newOTLPClient(env(tc.env), "test")
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("err = %v\nwant it to say %q", err, want)
					}
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Errorf("err = %v: it shows a header's value", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.url != tc.wantURL || c.http.Timeout != tc.wantTimeout || c.gzip != tc.wantGzip {
				t.Errorf("url %s timeout %s gzip %v, want %s %s %v", c.url, c.http.Timeout, c.gzip, tc.wantURL, tc.wantTimeout, tc.wantGzip)
			}
			if len(c.headers) != len(tc.wantHeaders) {
				t.Errorf("headers %v, want %v", c.headers, tc.wantHeaders)
			}
			for k, v := range tc.wantHeaders {
				if c.headers[k] != v {
					t.Errorf("headers %v, want %v", c.headers, tc.wantHeaders)
				}
			}
		})
	}
}

// The exporter is here to keep gRPC out of the relay (issue 30): the
// binary's packages hold none of it.
func TestRelayLinksNoGRPC(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH:", err)
	}
	out, err := exec.Command("go", "list", "-deps", "../..").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var linked []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"google.golang.org/grpc", "github.com/grpc-ecosystem/", "go.opentelemetry.io/proto/otlp/collector/"} {
			if strings.HasPrefix(pkg, bad) {
				linked = append(linked, pkg)
			}
		}
	}
	if len(linked) > 0 {
		t.Errorf("the relay links %d gRPC packages (%s): export through otlpClient, not otlptracehttp", len(linked), strings.Join(linked[:min(len(linked), 5)], ", "))
	}
}
