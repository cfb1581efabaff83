package integration

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// faultProxy is a TCP proxy between the relay and PostgreSQL that fails
// the way networks do without a word: no FIN, no RST, the traffic simply
// stops. Toxiproxy does this too, but embedding it brings its HTTP API,
// metrics and logging along for four small faults.
//
//   - drop: every connection open now stops forwarding in both directions
//     for good, while new connections work. What arrives on a dropped
//     connection is read and thrown away, as a NAT gateway that forgot the
//     flow would; the peer's writes never block.
//   - blackhole: drop, and new connections are accepted but never
//     forwarded (the server is unreachable) until restore.
//   - freeze: nothing moves on any connection, old or new, until thaw,
//     and then everything held goes on where it stopped: nothing is lost.
type faultProxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	conns     map[*proxiedConn]struct{}
	accepted  int
	blackhole bool
	frozen    bool
	thawed    *sync.Cond
	closed    bool
}

type proxiedConn struct {
	client, server net.Conn
	seq            int  // 0 for the first connection accepted, 1 for the next...
	dropped        bool // under faultProxy.mu
}

// newFaultProxy proxies to the host:port of the PostgreSQL URL pgURL and
// returns the proxy and pgURL pointing at it. t.Cleanup closes it.
func newFaultProxy(t testing.TB, pgURL string) (*faultProxy, string) {
	t.Helper()
	u, err := url.Parse(pgURL)
	if err != nil || u.Host == "" {
		t.Fatalf("the fault proxy needs a postgres:// URL with a host, got %q: %v", pgURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("cannot listen on loopback for the fault proxy: %v", err)
	}
	p := &faultProxy{ln: ln, target: u.Host, conns: map[*proxiedConn]struct{}{}}
	p.thawed = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	via := *u
	via.Host = ln.Addr().String()
	return p, via.String()
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *faultProxy) serve(client net.Conn) {
	pc := &proxiedConn{client: client}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		return
	}
	pc.dropped = p.blackhole
	pc.seq = p.accepted
	p.accepted++
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	if pc.dropped {
		// Unreachable: the client's bytes go nowhere, and nothing answers.
		_, _ = io.Copy(io.Discard, client)
		p.forget(pc)
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		p.forget(pc)
		return
	}
	p.mu.Lock()
	pc.server = server
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(pc, client, server) })
	wg.Go(func() { p.pipe(pc, server, client) })
	wg.Wait()
	p.forget(pc)
}

// pipe copies from src to dst until src ends, holding data while frozen and
// discarding it once dropped. A dropped connection is never closed towards
// either side: that is the point.
func (p *faultProxy) pipe(pc *proxiedConn, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen && !pc.dropped && !p.closed {
				p.thawed.Wait()
			}
			dropped := pc.dropped || p.closed
			p.mu.Unlock()
			if !dropped {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
		}
		if err != nil {
			p.mu.Lock()
			silent := pc.dropped && !p.closed
			p.mu.Unlock()
			src.Close()
			if !silent {
				// An end the proxy did not cause passes through; on a
				// dropped connection the other side never learns of it.
				dst.Close()
			}
			return
		}
	}
}

func (p *faultProxy) forget(pc *proxiedConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// drop silences every connection open now, for good; new ones work.
func (p *faultProxy) drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		pc.dropped = true
	}
	p.thawed.Broadcast()
	return len(p.conns)
}

// dropNewest silences the open connection the proxy accepted last, and
// reports which (its sequence number) and whether there was one.
func (p *faultProxy) dropNewest() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var newest *proxiedConn
	for pc := range p.conns {
		if newest == nil || pc.seq > newest.seq {
			newest = pc
		}
	}
	if newest == nil {
		return 0, false
	}
	newest.dropped = true
	p.thawed.Broadcast()
	return newest.seq, true
}

// open is how many of the connections the proxy accepted are open.
func (p *faultProxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// count is how many connections the proxy has accepted.
func (p *faultProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// unreachable drops every connection and leaves new ones unanswered until
// restore.
func (p *faultProxy) unreachable() {
	p.mu.Lock()
	p.blackhole = true
	p.mu.Unlock()
	p.drop()
}

// restore makes new connections work again after unreachable.
func (p *faultProxy) restore() {
	p.mu.Lock()
	p.blackhole = false
	p.mu.Unlock()
}

// freeze holds all traffic until thaw.
func (p *faultProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *faultProxy) thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.thawed.Broadcast()
	conns := make([]*proxiedConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pc := range conns {
		pc.client.Close()
		p.mu.Lock()
		server := pc.server
		p.mu.Unlock()
		if server != nil {
			server.Close()
		}
	}
}

// faultListener wraps a broker's listener (kfake.ListenFn) so that its
// connections can be silenced the way faultProxy silences PostgreSQL's:
// after drop, every connection accepted so far swallows what it is sent
// and answers nothing, while connections accepted later work.
type faultListener struct {
	net.Listener
	mu       sync.Mutex
	conns    []*faultConn
	accepted int
}

func (l *faultListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, silenced: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, fc)
	l.accepted++
	l.mu.Unlock()
	return fc, nil
}

// count is how many connections the listener has accepted.
func (l *faultListener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

// drop silences every connection accepted so far and returns how many.
func (l *faultListener) drop() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.silence()
	}
	n := len(l.conns)
	l.conns = nil
	return n
}

type faultConn struct {
	net.Conn
	once     sync.Once
	silenced chan struct{}
}

func (c *faultConn) silence() { c.once.Do(func() { close(c.silenced) }) }

func (c *faultConn) isSilenced() bool {
	select {
	case <-c.silenced:
		return true
	default:
		return false
	}
}

// Read hands the broker what the client sends until the connection is
// silenced; from then on the client's bytes are swallowed, and the broker
// waits for a request that never comes.
func (c *faultConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if !c.isSilenced() {
			return n, err
		}
		if err != nil {
			return 0, err
		}
	}
}

// Write lets the broker's answers through until the connection is
// silenced; from then on they vanish.
func (c *faultConn) Write(p []byte) (int, error) {
	if c.isSilenced() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}
