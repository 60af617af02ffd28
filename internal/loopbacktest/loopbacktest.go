// Package loopbacktest holds the loopback TCP helpers tests share: free
// ports (a port that was free a moment ago, drawn where no outgoing
// connection can take it before the test binds it) and throwaway
// servers.
package loopbacktest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Addr returns 127.0.0.1:port for a port that was free a moment ago. The
// port is drawn at random from [lowPort, the kernel's ephemeral range):
// a port of that range, which 127.0.0.1:0 gives, may be taken by any
// outgoing connection of the machine between the check and the test's
// own bind (an etcd member's "bind: address already in use" in .ci/run's
// race tier, with other test processes connecting all the while); a port
// below it only by another test's draw of the same port.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(PortOn(t, "127.0.0.1")))
}

// PortOn is a port that was free on every address of ips a moment ago
// (a node's own address and the static IP it also serves on), drawn as
// Addr draws it.
func PortOn(t testing.TB, ips ...string) int {
	t.Helper()
	if hi := ephemeralLow(); hi > lowPort {
		for range 200 {
			if port := lowPort + rand.IntN(hi-lowPort); freeOn(port, ips) {
				return port
			}
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// freeOn reports whether port can be bound on every address of ips.
func freeOn(port int, ips []string) bool {
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// lowPort is the lowest port Addr draws: above the well-known and most
// registered services' ports.
const lowPort = 10000

// ephemeralLow is the first port of the kernel's range for outgoing
// connections (Linux: net.ipv4.ip_local_port_range; elsewhere, IANA's
// 49152, which macOS uses).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 49152
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 49152
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 49152
	}
	return lo
}

// Port is Addr's port.
func Port(t testing.TB) int {
	t.Helper()
	addr, err := net.ResolveTCPAddr("tcp", Addr(t))
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	return addr.Port
}

// Serve listens on a free 127.0.0.1 port and calls handle, in a goroutine
// of its own, with each connection accepted (handle closes it). The
// listener closes at the end of the test.
func Serve(t testing.TB, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on a free port: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			go handle(c)
		}
	}()
	return ln
}
