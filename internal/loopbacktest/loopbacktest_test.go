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

// Addr's ports are drawn below the kernel's ephemeral range, where no
// outgoing connection takes them.
func TestAddrIsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	hi := ephemeralLow()
	for range 20 {
		_, p, err := net.SplitHostPort(Addr(t))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(p); n < lowPort || n >= hi {
			t.Errorf("port %d: want one in [%d, %d)", n, lowPort, hi)
		}
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
