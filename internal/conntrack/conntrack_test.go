package conntrack

import (
	"net"
	"testing"
	"time"
)

func TestCloseClosesTrackedAndWaitsForHandlers(t *testing.T) {
	t.Parallel()
	var s Set
	a, a2 := net.Pipe()
	b, b2 := net.Pipe()
	defer a2.Close()
	defer b2.Close()
	if !s.Add(a) || !s.Enter(b) {
		t.Fatal("Add or Enter refused before Close")
	}
	left := make(chan struct{})
	go func() {
		_, _ = b.Read(make([]byte, 1)) // until Close closes b
		time.Sleep(10 * time.Millisecond)
		close(left)
		s.Leave(b)
	}()
	s.Close()
	select {
	case <-left:
	default:
		t.Error("Close returned before the handler left")
	}
	if _, err := a2.Write([]byte("x")); err == nil {
		t.Error("a tracked connection is still open after Close")
	}
	c, c2 := net.Pipe()
	defer c.Close()
	defer c2.Close()
	if s.Add(c) || s.Enter(c) {
		t.Error("Add or Enter accepted a connection after Close")
	}
}

func TestRemovedIsNotClosed(t *testing.T) {
	t.Parallel()
	var s Set
	a, a2 := net.Pipe()
	defer a.Close()
	defer a2.Close()
	s.Add(a)
	s.Remove(a)
	s.Close()
	go func() { _, _ = a2.Read(make([]byte, 1)) }()
	if err := a.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); err != nil {
		t.Errorf("a removed connection was closed: %v", err)
	}
}
