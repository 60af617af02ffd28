// Package syncbuf is a bytes.Buffer safe for one goroutine writing while
// another reads: an SSH session's output copied by its goroutine while
// the caller may give up on it early (remote), a process's or a logger's
// output captured in tests.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write, String and Bytes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
