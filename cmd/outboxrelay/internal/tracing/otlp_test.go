package tracing

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/connector"
)

// export is one export request a collector got, and its headers (HTTP)
// or metadata (gRPC), read by lower-case name.
type export struct {
	header  func(key string) string
	request *coltracepb.ExportTraceServiceRequest
}

// collector is an OTLP receiver started in the test, over HTTP or gRPC,
// answering as its mode says.
type collector struct {
	endpoint string // as OTEL_EXPORTER_OTLP_ENDPOINT takes it
	mode     mode
	mu       sync.Mutex
	got      []export
	waited   []time.Duration // mode hang: how long each request waited for the client to give up
}

type mode int

const (
	accept mode = iota // decode and keep every export
	hang               // answer none until the client gives up
	refuse             // answer with an error the exporter does not retry
)

// hold waits, in mode hang, for the client to give up on the request of
// ctx, and records how long that took.
func (c *collector) hold(ctx context.Context) {
	start := time.Now()
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waited = append(c.waited, time.Since(start))
}

func (c *collector) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waited...)
}

func (c *collector) add(e export) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, e)
}

func (c *collector) exports() []export {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]export(nil), c.got...)
}

// startHTTPCollector is an OTLP/HTTP receiver decoding each request with
// the collector's own protobuf types; over TLS with cert when set.
func startHTTPCollector(t *testing.T, cert *tls.Certificate, m mode) *collector {
	c := &collector{mode: m}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch c.mode {
		case hang:
			// With its body read, the server notices the client closing
			// the connection, which ends the request's context.
			_, _ = io.Copy(io.Discard, req.Body)
			c.hold(req.Context())
			return
		case refuse:
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		raw, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("collector: read: %v", err)
			return
		}
		var r coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("collector: %s with content type %q, want /v1/traces in protobuf", req.URL.Path, req.Header.Get("Content-Type"))
		} else if err := proto.Unmarshal(raw, &r); err != nil {
			t.Errorf("collector: the body is not an ExportTraceServiceRequest: %v", err)
		}
		hs := req.Header.Clone()
		c.add(export{header: hs.Get, request: &r})
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	c.endpoint = srv.URL
	return c
}

// grpcCollector is the OTLP trace service of the collector's own gRPC
// types.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	*collector
}

func (g grpcCollector) Export(ctx context.Context, r *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	switch g.mode {
	case hang:
		g.hold(ctx)
		return nil, ctx.Err()
	case refuse:
		return nil, status.Error(codes.InvalidArgument, "no")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	g.add(export{header: func(k string) string { return strings.Join(md.Get(k), ",") }, request: r})
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startGRPCCollector is an OTLP/gRPC receiver on 127.0.0.1; over TLS with
// cert when set. Its endpoint has no scheme: the test gives the one it
// means.
func startGRPCCollector(t *testing.T, cert *tls.Certificate, m mode) *collector {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}})))
	}
	srv := grpc.NewServer(opts...)
	c := &collector{endpoint: ln.Addr().String(), mode: m}
	coltracepb.RegisterTraceServiceServer(srv, grpcCollector{collector: c})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c
}

// serverCert is a self-signed certificate for 127.0.0.1, and the path of
// its PEM file for OTEL_EXPORTER_OTLP_CERTIFICATE.
func serverCert(t *testing.T) (*tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, path
}

// traceParents are the writers' trace contexts of three events: their
// trace ids and span ids.
var traceParents = []struct{ traceID, spanID string }{
	{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
	{"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
	{"5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"},
}

// publishTraced publishes an event for each of traceParents through tr
// and exports their spans.
func publishTraced(t *testing.T, tr *Tracing) {
	t.Helper()
	s := tr.Sink(ackSink{})
	for i, tp := range traceParents {
		m := connector.Message{Topic: "outbox.event.order", Key: []byte("42"), EventID: fmt.Sprintf("e%d", i),
			Headers: []connector.Header{{Key: "traceparent", Value: []byte("00-" + tp.traceID + "-" + tp.spanID + "-01")}}}
		if err := s.Publish(t.Context(), &m, func(error) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// checkSpans checks that the collector got the relay's span of each event
// of traceParents, in the writer's trace, child of the writer's span, and
// the headers OTEL_EXPORTER_OTLP_HEADERS set.
func checkSpans(t *testing.T, c *collector) {
	t.Helper()
	got := c.exports()
	if len(got) == 0 {
		t.Fatal("the collector got no export")
	}
	spans := map[string]*tracepb.Span{} // by trace id
	for _, e := range got {
		for k, want := range map[string]string{"api-key": "s=cret token", "x-tenant": "acme"} {
			if v := e.header(k); v != want {
				t.Errorf("header %s = %q, want %q", k, v, want)
			}
		}
		for _, rs := range e.request.ResourceSpans {
			if v := attr(rs.Resource.GetAttributes(), "service.version"); v != "1.2.3" {
				t.Errorf("service.version %q, want 1.2.3", v)
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[fmt.Sprintf("%x", s.TraceId)] = s
				}
			}
		}
	}
	if len(spans) != len(traceParents) {
		t.Errorf("the collector got spans of %d traces, want %d", len(spans), len(traceParents))
	}
	for i, tp := range traceParents {
		s := spans[tp.traceID]
		switch {
		case s == nil:
			t.Errorf("no span in the writer's trace %s", tp.traceID)
		case fmt.Sprintf("%x", s.ParentSpanId) != tp.spanID:
			t.Errorf("trace %s: the span's parent is %x, want the writer's %s", tp.traceID, s.ParentSpanId, tp.spanID)
		case s.Name != "send outbox.event.order" || s.Kind != tracepb.Span_SPAN_KIND_PRODUCER:
			t.Errorf("trace %s: span %q of kind %v, want a producer span send outbox.event.order", tp.traceID, s.Name, s.Kind)
		case attr(s.Attributes, "messaging.message.id") != fmt.Sprintf("e%d", i):
			t.Errorf("trace %s: messaging.message.id %q, want e%d", tp.traceID, attr(s.Attributes, "messaging.message.id"), i)
		}
	}
}

// setOTELEnv sets env for the test and unsets every other OTEL_ variable
// the process has, so that the exporters read only what the test gives.
func setOTELEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			_ = os.Unsetenv(k)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// The relay's spans, made and exported as the relay does it (FromEnv,
// Sink, Shutdown), reach an OTLP collector over either protocol, as the
// exporters read the standard variables: the endpoint and its scheme,
// headers (percent-decoded), a CA certificate, insecure.
func TestExportOverOTLP(t *testing.T) {
	cert, caFile := serverCert(t)
	for _, tc := range []struct {
		name      string
		start     func(*testing.T, *tls.Certificate, mode) *collector
		tls       bool
		endpoint  func(addr string) string // OTEL_EXPORTER_OTLP_ENDPOINT
		env       map[string]string
		wantProto string
	}{
		{name: "http", start: startHTTPCollector, wantProto: "http/protobuf"},
		{name: "http over TLS", start: startHTTPCollector, tls: true, env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": caFile}, wantProto: "http/protobuf"},
		{name: "http, traces protocol over the general one", start: startHTTPCollector,
			env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, wantProto: "http/protobuf"},
		{name: "grpc, insecure by the scheme", start: startGRPCCollector, endpoint: func(a string) string { return "http://" + a },
			env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantProto: "grpc"},
		{name: "grpc, insecure by OTEL_EXPORTER_OTLP_INSECURE", start: startGRPCCollector, endpoint: func(a string) string { return "https://" + a },
			env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_INSECURE": "true"}, wantProto: "grpc"},
		{name: "grpc over TLS", start: startGRPCCollector, tls: true, endpoint: func(a string) string { return "https://" + a },
			env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_CERTIFICATE": caFile}, wantProto: "grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *collector
			if tc.tls {
				c = tc.start(t, cert, accept)
			} else {
				c = tc.start(t, nil, accept)
			}
			env := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": c.endpoint,
				"OTEL_EXPORTER_OTLP_HEADERS":  "api-key=s%3Dcret%20token,X-Tenant=acme",
				"OTEL_BSP_SCHEDULE_DELAY":     "50",
			}
			if tc.endpoint != nil {
				env["OTEL_EXPORTER_OTLP_ENDPOINT"] = tc.endpoint(c.endpoint)
			}
			for k, v := range tc.env {
				env[k] = v
			}
			setOTELEnv(t, env)
			tr, err := FromEnv(t.Context(), "1.2.3", slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if tr.Protocol() != tc.wantProto {
				t.Errorf("protocol %q, want %q", tr.Protocol(), tc.wantProto)
			}
			publishTraced(t, tr)
			checkSpans(t, c)
		})
	}
}

// collectors are the two kinds of collector, each with the endpoint that
// reaches it in plain text.
var collectors = []struct {
	protocol string
	start    func(*testing.T, *tls.Certificate, mode) *collector
	endpoint func(addr string) string
}{
	{protocol: "http/protobuf", start: startHTTPCollector, endpoint: func(a string) string { return a }},
	{protocol: "grpc", start: startGRPCCollector, endpoint: func(a string) string { return "http://" + a }},
}

// exportOne starts tracing against c over protocol with env besides, and
// publishes one traced event; the export runs in the background.
func exportOne(t *testing.T, c *collector, endpoint, protocol string, env map[string]string, log *slog.Logger) {
	t.Helper()
	all := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_BSP_SCHEDULE_DELAY": "50"}
	for k, v := range env {
		all[k] = v
	}
	setOTELEnv(t, all)
	tr, err := FromEnv(t.Context(), "1.2.3", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tr.Shutdown(ctx)
	})
	m := connector.Message{Topic: "t", Headers: []connector.Header{{Key: "traceparent", Value: []byte(writerTP)}}}
	if err := tr.Sink(ackSink{}).Publish(t.Context(), &m, func(error) {}); err != nil {
		t.Fatal(err)
	}
}

// OTEL_EXPORTER_OTLP_TIMEOUT bounds how long the exporter waits for a
// collector that does not answer, in place of its default of 10 s.
func TestExportTimeoutFromEnv(t *testing.T) {
	for _, cc := range collectors {
		t.Run(cc.protocol, func(t *testing.T) {
			c := cc.start(t, nil, hang)
			exportOne(t, c, cc.endpoint(c.endpoint), cc.protocol, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "200"}, slog.New(slog.DiscardHandler))
			deadline := time.Now().Add(8 * time.Second)
			for len(c.waits()) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the exporter still waited on the collector 8s after a 200ms timeout")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// Half the default: far above 200ms on a loaded machine, and
			// still telling the two apart.
			if w := c.waits()[0]; w > 5*time.Second {
				t.Errorf("the exporter gave up on the collector after %s, want about 200ms", w)
			}
		})
	}
}

// A collector that refuses the spans costs them, not the events, and the
// relay logs a WARN for them.
func TestExportErrorIsLogged(t *testing.T) {
	for _, cc := range collectors {
		t.Run(cc.protocol, func(t *testing.T) {
			c := cc.start(t, nil, refuse)
			var logged lockedBuffer
			exportOne(t, c, cc.endpoint(c.endpoint), cc.protocol, nil, slog.New(slog.NewTextHandler(&logged, nil)))
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(logged.String(), "level=WARN msg=\"OpenTelemetry: spans may be lost\" component=tracing") {
				if time.Now().After(deadline) {
					t.Fatalf("no WARN that spans may be lost within 10s of a refused export; log:\n%s", logged.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// OTEL_EXPORTER_OTLP_PROTOCOL=http/json, which the HTTP exporter speaks
// too, sends the spans as OTLP's JSON.
func TestExportOverOTLPHTTPJSON(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		mu.Lock()
		bodies = append(bodies, req.Header.Get("Content-Type")+" "+string(raw))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	setOTELEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
	tr, err := FromEnv(t.Context(), "1.2.3", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	publishTraced(t, tr)
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(bodies, "\n")
	if !strings.HasPrefix(all, "application/json ") {
		t.Errorf("the collector got %q, want application/json", all)
	}
	for _, tp := range traceParents {
		// OTLP's JSON writes ids in hex, of either case.
		if !strings.Contains(strings.ToLower(all), `"traceid":"`+tp.traceID+`"`) {
			t.Errorf("no span of trace %s in the JSON the collector got", tp.traceID)
		}
	}
	if t.Failed() {
		t.Logf("the collector got:\n%s", all)
	}
}

// lockedBuffer is a log destination the exporter's goroutines may write
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A variable the exporter cannot use is an ERROR in the relay's log,
// naming what it could not parse, and the export goes on with the default.
func TestBadExporterVariableIsLogged(t *testing.T) {
	c := startHTTPCollector(t, nil, accept)
	setOTELEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": c.endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT": "ten seconds"})
	var logged lockedBuffer
	tr, err := FromEnv(t.Context(), "1.2.3", slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := logged.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "component=tracing") || !strings.Contains(got, "ten seconds") {
		t.Errorf("want an ERROR of component tracing naming the value; log:\n%s", got)
	}
	publishTraced(t, tr)
	if len(c.exports()) == 0 {
		t.Error("no export with the default timeout")
	}
}
