package node

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hamaster/hamaster/internal/conntrack"
)

// tcpProxy forwards a listener's connections to target at L4 (the static
// IP's "access config" in front of the real apiserver).
type tcpProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	conns  conntrack.Set
}

func startTCPProxy(addr, target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *tcpProxy) forward(client net.Conn) {
	defer client.Close()
	if !p.conns.Add(client) {
		return
	}
	defer p.conns.Remove(client)
	backend, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return // the client sees the connection close, as with a dead VM
	}
	defer backend.Close()
	if !p.conns.Add(backend) {
		return
	}
	defer p.conns.Remove(backend)
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Go(func() { pipe(backend, client) })
	pipe(client, backend)
	wg.Wait()
}

// Close stops listening, closes every forwarded connection and waits for
// the forwarding goroutines.
func (p *tcpProxy) Close() error {
	err := p.ln.Close()
	p.conns.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
