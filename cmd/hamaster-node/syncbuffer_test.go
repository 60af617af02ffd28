package main

import (
	"github.com/hamaster/hamaster/internal/syncbuf"
)

// syncBuffer captures output written by one goroutine and read by another.
type syncBuffer = syncbuf.Buffer
