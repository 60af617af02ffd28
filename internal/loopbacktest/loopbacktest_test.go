package loopbacktest

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestAddrAndPortCanBeBound(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{Addr(t), net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		_ = ln.Close()
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	ln := Serve(t, func(c net.Conn) { defer c.Close(); _, _ = io.WriteString(c, "hello") })
	for range 2 { // each connection gets its own handler
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != "hello" {
			t.Errorf("read %q, %v; want hello", got, err)
		}
	}
}
