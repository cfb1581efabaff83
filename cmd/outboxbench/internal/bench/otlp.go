package bench

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// otlpReceiver takes the relays' OTLP/HTTP trace exports and drops them,
// counting what came: the cost measured is the relay's, not a collector's.
type otlpReceiver struct {
	url             string
	srv             *http.Server
	requests, bytes atomic.Int64
}

func startOTLPReceiver() (*otlpReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := io.Copy(io.Discard, req.Body)
		r.requests.Add(1)
		r.bytes.Add(n)
		// An empty ExportTraceServiceResponse is zero bytes of protobuf.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *otlpReceiver) close() { _ = r.srv.Close() }
