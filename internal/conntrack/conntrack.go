// Package conntrack keeps the set of a proxy's open connections, so that
// stopping the proxy can close them all at once, as a dead machine's
// connections end (dataplane/lbproxy, dataplane/node's static-IP
// forwarder).
package conntrack

import (
	"net"
	"sync"
)

// Set is the open connections of one proxy. Its zero value is ready; it
// must not be copied after first use.
type Set struct {
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
	handlers sync.WaitGroup
}

// Add tracks c until Remove. It reports false, tracking nothing, once
// Close has run: the caller then closes c itself.
func (s *Set) Add(c net.Conn) bool { return s.add(c, false) }

// Enter is Add for a connection whose handler Close waits for: the
// handler calls Leave when it is done.
func (s *Set) Enter(c net.Conn) bool { return s.add(c, true) }

func (s *Set) add(c net.Conn, handler bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	if handler {
		s.handlers.Add(1)
	}
	return true
}

// Remove stops tracking c.
func (s *Set) Remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// Leave is Remove for a connection added with Enter.
func (s *Set) Leave(c net.Conn) {
	s.Remove(c)
	s.handlers.Done()
}

// Close refuses new connections, closes every tracked one and waits for
// the handlers of those added with Enter to Leave.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.handlers.Wait()
}
