package bench

import (
	"net"
	"net/url"
	"sync"
	"time"
)

// delayProxy stands between the relays and PostgreSQL and holds every
// chunk of bytes delay in each direction, as a network between them would:
// a round trip costs 2 x delay. Order is kept, and the bandwidth is not
// limited.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay}
	p.wg.Go(p.serve)
	return p, nil
}

// url is dbURL with its host and port those of the proxy.
func (p *delayProxy) url(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.Host = p.ln.Addr().String()
	return u.String(), nil
}

func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *delayProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client) })
		p.wg.Go(func() { p.pipe(client, server) })
	}
}

// pipe copies src to dst, each chunk delay after it was read. When either
// side ends, both connections are closed.
func (p *delayProxy) pipe(dst, src net.Conn) {
	type chunk struct {
		data []byte
		at   time.Time
	}
	chunks := make(chan chunk, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.at.Add(p.delay)))
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				for range chunks {
				}
				return
			}
		}
	})
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunks <- chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
		}
		if err != nil {
			src.Close()
			break
		}
	}
	close(chunks)
	wg.Wait()
}
