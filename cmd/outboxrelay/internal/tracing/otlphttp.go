package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/internal/tlsfiles"
)

// otlpClient sends spans over OTLP/HTTP in protobuf, as otlptracehttp
// does. It exists because otlptracehttp imports the OTLP collector
// package, whose Go package also holds the gRPC service and its
// grpc-gateway: that linked all of google.golang.org/grpc into the
// relay, about 10 MB of binary and 4 MB of resident file pages
// (issue 30), for a request body that is one repeated field.
//
// Its rules are otlptracehttp v1.47.0's (client.go, internal/otlpconfig,
// internal/envconfig, internal/retry), cited where they are followed. It
// differs where a value the SDK would log and ignore is an error at start,
// where _INSECURE contradicts the endpoint's scheme (the SDK lets it
// override the scheme; here that is an error), and in reading only
// protobuf answers (the SDK reads JSON too; a collector answers a protobuf
// request in protobuf).
type otlpClient struct {
	url       string
	headers   map[string]string // from _HEADERS, set after User-Agent so they may replace it
	gzip      bool
	http      *http.Client
	userAgent string
	retry     retryPolicy

	stopped context.Context // done once Stop is called: in-flight exports end
	stop    context.CancelFunc
}

var _ otlptrace.Client = (*otlpClient)(nil)

// retryPolicy is otlptracehttp's retry.DefaultConfig: exponential
// backoff from 5 s to 30 s, for at most a minute, within the export's
// context.
type retryPolicy struct {
	initial, max, maxElapsed time.Duration
}

var defaultRetry = retryPolicy{initial: 5 * time.Second, max: 30 * time.Second, maxElapsed: time.Minute}

const (
	tracesPath     = "/v1/traces"     // otlpconfig.DefaultTracesPath
	defaultTimeout = 10 * time.Second // otlpconfig.DefaultTimeout
	// otlpconfig.DefaultMaxRequestSize and DefaultMaxResponseSize.
	maxRequestSize  = 64 << 20
	maxResponseSize = 4 << 20
	contentType     = "application/x-protobuf"
)

// newOTLPClient reads the OTEL_EXPORTER_OTLP_ variables through getenv,
// and the certificate files they name. Every value it
// cannot use is an error naming the variable and the value (header
// values excepted: they may be secrets), all of them joined.
func newOTLPClient(getenv func(string) string, version string) (*otlpClient, error) {
	env := func(key string) string { return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + key)) }
	// traces returns the per-signal variable when it is set, the general
	// one when not, as otlpconfig applies the general option first and
	// the TRACES_ one after it.
	traces := func(key string) (name, value string) {
		if v := env("TRACES_" + key); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + key, v
		}
		return "OTEL_EXPORTER_OTLP_" + key, env(key)
	}
	var errs []error

	endpoint, err := endpointFromEnv(env)
	if err != nil {
		errs = append(errs, err)
	}

	headers := map[string]string{}
	if name, v := traces("HEADERS"); v != "" {
		h, err := parseHeaders(name, v)
		if err != nil {
			errs = append(errs, err)
		}
		headers = h
	}

	timeout := defaultTimeout
	if name, v := traces("TIMEOUT"); v != "" {
		// envconfig.WithDuration: whole milliseconds.
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want the export timeout in whole milliseconds, e.g. 10000", name, v))
		} else {
			timeout = time.Duration(ms) * time.Millisecond
		}
	}

	compress := false
	if name, v := traces("COMPRESSION"); v != "" {
		switch v {
		case "gzip":
			compress = true
		case "none":
		default:
			// otlpconfig.WithEnvCompression sends anything but gzip
			// uncompressed; a misspelt gzip is better told.
			errs = append(errs, fmt.Errorf("%s=%q: want gzip or none", name, v))
		}
	}

	tlsCfg, tlsVars, err := tlsFromEnv(env)
	if err != nil {
		errs = append(errs, err)
	}
	if name, v := traces("INSECURE"); v != "" && endpoint != nil && strings.EqualFold(v, "true") != (endpoint.Scheme == "http") {
		// otlpconfig lets _INSECURE replace the endpoint's scheme; the
		// specification says the scheme decides for OTLP/HTTP. Either
		// way the two disagreeing is a mistake.
		errs = append(errs, fmt.Errorf("%s=%q, but the trace endpoint is %s: the endpoint's scheme decides; unset %s", name, v, endpoint, name))
	}
	if tlsCfg != nil && endpoint != nil && endpoint.Scheme == "http" {
		// client.Start's errInsecureEndpointWithTLS.
		errs = append(errs, fmt.Errorf("%s set, but the trace endpoint %s is plain http: use https, or unset the certificate", strings.Join(tlsVars, " and "), endpoint))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	// otlptracehttp's ourTransport, a copy of net/http's DefaultTransport
	// that no other package can have changed.
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tlsCfg,
	}
	stopped, stop := context.WithCancel(context.Background())
	return &otlpClient{
		url:     endpoint.String(),
		headers: headers,
		gzip:    compress,
		// The timeout bounds each attempt, as the SDK's http.Client.Timeout
		// does; the export's context bounds the retries.
		http:      &http.Client{Transport: transport, Timeout: timeout},
		userAgent: "outboxrelay/" + version + " OTel OTLP Exporter Go/" + otlptrace.Version(),
		retry:     defaultRetry,
		stopped:   stopped,
		stop:      stop,
	}, nil
}

// endpointFromEnv is the URL spans are posted to: _TRACES_ENDPOINT as it
// is (its root when it has no path), or else _ENDPOINT with /v1/traces
// appended to its path, as otlpconfig's getOptionsFromEnv says. Only the
// scheme, host and path are used, as there.
func endpointFromEnv(env func(string) string) (*url.URL, error) {
	name, v := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", env("TRACES_ENDPOINT")
	if v == "" {
		name, v = "OTEL_EXPORTER_OTLP_ENDPOINT", env("ENDPOINT")
	}
	u, err := url.Parse(v)
	if err == nil {
		u.Scheme = strings.ToLower(u.Scheme)
	}
	// The SDK sends anything but http over https, and a URL without a
	// host to nowhere; both are mistakes better told at start.
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: want the collector's OTLP/HTTP URL, e.g. http://otel-collector:4318", name, secret.Redact(v))
	}
	p := u.Path
	if name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
		p = path.Join(p, tracesPath)
	}
	// otlpconfig.cleanPath.
	if p = strings.TrimSpace(p); p == "" || p == "." {
		p = "/"
	}
	if !path.IsAbs(p) {
		p = "/" + p
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}, nil
}

// parseHeaders reads name's value, k=v,k2=v2 with URL-encoded values,
// as envconfig.stringToHeader does. The error names the item by its
// position or key, never its value, which is often a token.
func parseHeaders(name, v string) (map[string]string, error) {
	headers := map[string]string{}
	var errs []error
	for i, item := range strings.Split(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue // a trailing comma
		}
		k, val, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: item %d has no '=' (value not shown, it may be a secret): want key=value,key2=value2", name, i+1))
			continue
		case !validHeaderKey(k):
			errs = append(errs, fmt.Errorf("%s: %q is not a valid HTTP header name", name, k))
			continue
		}
		val, err := url.PathUnescape(val)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: the value of %s is not URL-encoded (value not shown, it may be a secret): write a %% as %%25", name, k))
			continue
		}
		headers[k] = strings.TrimSpace(val)
	}
	return headers, errors.Join(errs...)
}

// validHeaderKey is envconfig.isValidHeaderKey: an RFC 7230 token.
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// tlsFromEnv is the TLS configuration the certificate variables ask for,
// nil when none is set, and the names of those set, read as tlsfiles reads
// kafka.tls's files.
func tlsFromEnv(env func(string) string) (*tls.Config, []string, error) {
	var (
		files tlsfiles.Files
		names tlsfiles.Names
		set   []string
		errs  []error
	)
	for _, prefix := range []string{"TRACES_", ""} {
		if file := env(prefix + "CERTIFICATE"); file != "" {
			files.CAFile, names.CA = file, "OTEL_EXPORTER_OTLP_"+prefix+"CERTIFICATE"
			set = append(set, names.CA)
			break // the TRACES_ variable wins
		}
	}
	// envconfig.WithClientCert uses a pair only when both are set, the
	// TRACES_ pair over the general one; one without the other is an
	// error here rather than ignored.
	for _, prefix := range []string{"TRACES_", ""} {
		certName, keyName := "OTEL_EXPORTER_OTLP_"+prefix+"CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_"+prefix+"CLIENT_KEY"
		certFile, keyFile := env(prefix+"CLIENT_CERTIFICATE"), env(prefix+"CLIENT_KEY")
		switch {
		case certFile == "" && keyFile == "":
		case certFile == "" || keyFile == "":
			errs = append(errs, fmt.Errorf("%s=%q and %s=%q: set both, or neither", certName, certFile, keyName, keyFile))
		case files.CertFile == "":
			files.CertFile, files.KeyFile, names.Cert, names.Key = certFile, keyFile, certName, keyName
			set = append(set, certName, keyName)
		}
	}
	if len(set) == 0 {
		return nil, nil, errors.Join(errs...)
	}
	cfg, err := files.ConfigNamed(names)
	return cfg, set, errors.Join(append(errs, err)...)
}

// Start does nothing: connections are made as spans are sent.
func (c *otlpClient) Start(ctx context.Context) error { return ctx.Err() }

// Stop ends the exports in flight.
func (c *otlpClient) Stop(ctx context.Context) error {
	c.stop()
	return ctx.Err()
}

// UploadTraces sends one ExportTraceServiceRequest holding rss, retrying
// while the collector answers 429, 502, 503 or 504 (client.go's
// retryable cases) and ctx allows. A partial success is an error, so
// that the batch processor hands it to the error handler, as the SDK's
// client does.
func (c *otlpClient) UploadTraces(ctx context.Context, rss []*tracepb.ResourceSpans) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.stopped, cancel)()

	body, err := exportRequest(rss)
	if err != nil {
		return err
	}
	if c.gzip {
		if body, err = gzipped(body); err != nil {
			return err
		}
	}

	// retry.Config.RequestFunc: wait the greater of the backoff and the
	// collector's Retry-After; give up once the retries have taken
	// maxElapsed, or would by waiting Retry-After.
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(c.retry.initial), backoff.WithMaxInterval(c.retry.max), backoff.WithMaxElapsedTime(0))
	start := time.Now()
	for {
		err := c.send(ctx, body)
		var r *retryableError
		if !errors.As(err, &r) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		// Compared as a difference: a Retry-After near the largest
		// duration would overflow a sum.
		elapsed := time.Since(start)
		if r.after > c.retry.maxElapsed-elapsed {
			return fmt.Errorf("gave up retrying after %s: waiting %s more would pass %s: %w",
				elapsed.Round(time.Millisecond), r.after.Round(time.Millisecond), c.retry.maxElapsed, err)
		}
		t := time.NewTimer(max(r.after, b.NextBackOff()))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// send posts body once.
func (c *otlpClient) send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("send spans to %s: %w", c.url, err)
	}
	req.Header.Set("User-Agent", c.userAgent)
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", contentType)
	if c.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) && uerr.Temporary() { // what client.go retries
			return &retryableError{err: err}
		}
		return err // already names the URL
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseSize+1))
	if err != nil {
		return fmt.Errorf("read the answer of %s: %w", c.url, err)
	}
	if len(data) > maxResponseSize {
		return fmt.Errorf("the answer of %s is above %d bytes", c.url, maxResponseSize)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if len(data) == 0 || resp.Header.Get("Content-Type") != contentType {
			// client.go reads a JSON answer too; to a protobuf request
			// the collector answers in protobuf.
			return nil
		}
		return partialSuccess(data)
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	if msg == "" {
		msg = "(empty)"
	}
	err = fmt.Errorf("send spans to %s: %s (body: %s)", c.url, resp.Status, msg)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryableError{after: retryAfter(resp.Header.Get("Retry-After")), err: err}
	}
	return err
}

// retryableError is an answer worth retrying, after at least after.
type retryableError struct {
	after time.Duration
	err   error
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// retryAfter is client.go's retryAfterDuration: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		if s > int64(1<<63-1)/int64(time.Second) {
			return time.Duration(1<<63 - 1)
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// exportRequest is the ExportTraceServiceRequest holding rss: its only
// field is `repeated ResourceSpans resource_spans = 1`, so it is each
// ResourceSpans as a length-delimited field 1, the bytes proto.Marshal
// makes of the request.
func exportRequest(rss []*tracepb.ResourceSpans) ([]byte, error) {
	sizes := make([]int, len(rss))
	total := 0
	for i, rs := range rss {
		sizes[i] = proto.Size(rs)
		total += protowire.SizeTag(1) + protowire.SizeBytes(sizes[i])
	}
	if total > maxRequestSize {
		return nil, fmt.Errorf("the batch of spans is %d bytes, above the %d an export request may hold: lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE", total, maxRequestSize)
	}
	b := make([]byte, 0, total)
	for i, rs := range rss {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i]))
		var err error
		// The size was computed just above, on the same message.
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, rs); err != nil {
			return nil, fmt.Errorf("encode spans: %w", err)
		}
	}
	return b, nil
}

// gzipWriters saves the compressor's state, most of a megabyte, between
// exports, as client.go's gzPool does.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

func gzipped(body []byte) ([]byte, error) {
	zw := gzipWriters.Get().(*gzip.Writer)
	defer func() {
		zw.Reset(io.Discard) // not to keep buf alive in the pool
		gzipWriters.Put(zw)
	}()
	var buf bytes.Buffer
	zw.Reset(&buf)
	if _, err := zw.Write(body); err != nil {
		return nil, fmt.Errorf("compress spans: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress spans: %w", err)
	}
	return buf.Bytes(), nil
}

// partialSuccess reads an ExportTraceServiceResponse: an error when its
// partial_success (field 1) rejected spans (its field 1) or says why
// (its field 2), as client.go reports one.
func partialSuccess(b []byte) error {
	var (
		rejected int64
		msg      string
	)
	errBad := errors.New("the collector's answer is not an ExportTraceServiceResponse")
	// Repeated occurrences of a message field merge, and of a scalar the
	// last wins: reading each into the same variables does both.
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case num == 1 && typ == protowire.VarintType:
				n, _ := protowire.ConsumeVarint(v)
				rejected = int64(n)
			case num == 2 && typ == protowire.BytesType:
				msg = string(v)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errBad, err)
	}
	if rejected == 0 && msg == "" {
		return nil
	}
	if msg == "" {
		msg = "empty message"
	}
	// internal.PartialSuccess's text.
	return fmt.Errorf("OTLP partial success: %s (%d spans rejected)", msg, rejected)
}

// eachField calls fn with each field of the message b: its number, wire
// type and value (the bytes inside a length-delimited field, the encoded
// value of the others).
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		v := b[:n]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
