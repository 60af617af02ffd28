// Package loopbacktest holds the loopback TCP helpers tests share: free
// ports (a port that was free a moment ago; another process may take it
// before the test binds it, which tests accept) and throwaway servers.
package loopbacktest

import (
	"net"
	"testing"
)

// Addr returns 127.0.0.1:port for a port that was free a moment ago.
func Addr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
