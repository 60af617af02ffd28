package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/etcdmember/etcdtest"
	"github.com/hamaster/hamaster/internal/loopbacktest"
	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/remote/sshtest"
)

// TestEtcdThroughTunnel lists an embedded etcd's members through the SSH
// tunnel. That the traffic really goes through sshd is shown three ways:
// sshd only permits tunnels to etcd (PermitOpen), so a tunnel to another
// local port that this process could reach directly is refused; sshd logs
// the direct-tcpip channels etcd's client opened; and once the SSH client
// is closed the etcd client can no longer reach etcd.
func TestEtcdThroughTunnel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cl := etcdtest.Start(t, 1, etcdtest.Options{})
	u, err := url.Parse(cl.Members[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	etcdAddr := u.Host
	closedAddr := loopbacktest.Addr(t)
	local, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	s := sshtest.Start(t, sshtest.Options{Config: []string{
		"PermitOpen " + etcdAddr + " " + closedAddr,
		"LogLevel DEBUG1", // logs each direct-tcpip channel's target
	}})
	c := dial(ctx, t, config(s))

	// The remote side's rules apply: the tunnels are opened by sshd.
	for _, tt := range []struct {
		name     string
		addr     string
		wantKind error
		wantIn   string
	}{
		{name: "forbidden by PermitOpen", addr: local.Addr().String(), wantKind: errkind.FailedPrecondition, wantIn: "forbids"},
		{name: "nothing listening", addr: closedAddr, wantKind: errkind.Unavailable, wantIn: closedAddr},
		{name: "not host:port", addr: "127.0.0.1", wantKind: errkind.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := c.DialContext(ctx, "tcp", tt.addr)
			if err == nil {
				conn.Close()
				t.Fatalf("DialContext(%s) succeeded", tt.addr)
			}
			if !errors.Is(err, tt.wantKind) || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("DialContext(%s): %v, want kind %v mentioning %q", tt.addr, err, tt.wantKind, tt.wantIn)
			}
		})
	}

	var dials atomic.Int32
	dialer := c.EtcdDialer()
	em, err := etcdmember.New(ctx, etcdmember.Config{
		Endpoints: []string{cl.Members[0].ClientURL},
		DialContext: func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer(ctx, addr)
		},
		DialTimeout:   5 * time.Second,
		StatusTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("etcdmember.New through the tunnel: %v", err)
	}
	defer em.Close()
	ms, err := em.Members(ctx)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if len(ms) != 1 || ms[0].Name != "m-1" || !ms[0].Healthy || !ms[0].Leader {
		t.Errorf("members %+v, want m-1 healthy and leader", ms)
	}
	if dials.Load() == 0 {
		t.Error("the etcd client never used the tunnel dialer")
	}
	port := etcdAddr[strings.LastIndex(etcdAddr, ":")+1:]
	if want := "target 127.0.0.1 port " + port; !strings.Contains(s.Log(), want) {
		t.Errorf("sshd did not log a direct-tcpip channel to etcd (%q)", want)
	}

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := em.Members(short); err == nil {
		t.Error("Members succeeded after the SSH client was closed: the traffic did not go through it")
	}
	if _, err := c.DialContext(ctx, "tcp", etcdAddr); !errors.Is(err, errkind.Unavailable) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("DialContext after Close: %v, want Unavailable saying closed", err)
	}
}

// TestKeepaliveDetectsDeadConnection freezes the TCP path to sshd (a proxy
// stops forwarding without closing anything, as a NAT that dropped its
// mapping does): the next DialContext and Run must fail once a keepalive
// goes unanswered, instead of hanging.
func TestKeepaliveDetectsDeadConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	s := sshtest.Start(t, sshtest.Options{})
	p := startProxy(t, s.Addr)
	var logs syncbuf.Buffer
	cfg := config(s)
	cfg.Addr = p.addr
	cfg.KnownHostsFile = s.KnownHosts(t, p.addr, s.HostKeys)
	// Long enough that a keepalive is answered within two intervals while
	// 4 race-instrumented test binaries share 2 CPUs (at 100 ms, a missed
	// 200 ms answer closed the connection during the Runs below).
	cfg.KeepaliveInterval = 500 * time.Millisecond
	cfg.Logger = newLogger(&logs)
	c := dial(ctx, t, cfg)

	// Several intervals pass with keepalives answered.
	for range 3 {
		if out, _, err := c.Run(ctx, "sleep 0.1; echo ok"); err != nil || string(out) != "ok\n" {
			t.Fatalf("Run through the proxy: %q, %v", out, err)
		}
	}
	p.freeze()
	start := time.Now()
	conn, err := c.DialContext(ctx, "tcp", "127.0.0.1:1")
	if err == nil {
		conn.Close()
		t.Fatal("DialContext succeeded over a frozen connection")
	}
	// The keepalive ended it (the error says so, below), not ctx's 20 s;
	// the time is only a hang guard: two unanswered keepalives at 500 ms
	// are expected in about a second.
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("hang guard: DialContext failed only after %s (expected: two keepalive intervals, 1 s)", took)
	}
	if !errors.Is(err, errkind.Unavailable) || !strings.Contains(err.Error(), "keepalive") {
		t.Errorf("DialContext: %v, want Unavailable naming the keepalive", err)
	}
	if _, _, err := c.Run(ctx, "true"); !errors.Is(err, errkind.Unavailable) {
		t.Errorf("Run on a dead connection: %v, want Unavailable", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "dead") {
		t.Errorf("no warning about the dead connection in the log:\n%s", logs.String())
	}
}

// proxy forwards TCP connections to a target until frozen, then swallows
// everything silently and keeps the connections open.
type proxy struct {
	addr   string
	target string
	l      net.Listener
	frozen atomic.Bool
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String(), target: target, l: l}
	p.wg.Go(func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				down.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, down, up)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(up, down) })
			p.wg.Go(func() { p.pipe(down, up) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) freeze() { p.frozen.Store(true) }

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.frozen.Load() {
			if err == nil {
				continue // drop it, keep reading until the cleanup closes src
			}
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				dst.Close()
			}
			return
		}
	}
}
