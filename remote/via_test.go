package remote_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/remote/sshtest"
)

// TestVia reaches an sshd through a jump host (ssh -J): the second
// connection is opened by the first sshd (its log shows the direct-tcpip
// channel), and the second host's key is still checked against
// known_hosts.
func TestVia(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	bastion := sshtest.Start(t, sshtest.Options{Config: []string{"LogLevel DEBUG1"}})
	master := sshtest.Start(t, sshtest.Options{})
	jump := dial(ctx, t, config(bastion))

	cfg := config(master)
	cfg.Via = jump
	c := dial(ctx, t, cfg)
	out, _, err := c.Run(ctx, "echo via")
	if err != nil || strings.TrimSpace(string(out)) != "via" {
		t.Fatalf("run through the jump host: %q, %v", out, err)
	}
	host, port, _ := net.SplitHostPort(master.Addr)
	if !strings.Contains(bastion.Log(), "connected to "+host+" port "+port) {
		t.Errorf("the bastion's sshd did not open the connection to %s:\n%s", master.Addr, bastion.Log())
	}

	// The master's host key is checked: with the bastion's known_hosts
	// (which does not list the master), the jump must fail.
	bad := config(master)
	bad.Via = jump
	bad.KnownHostsFile = bastion.KnownHostsFile
	if c, err := remote.Dial(ctx, bad); err == nil {
		c.Close()
		t.Fatal("dialled the master through the jump host with a known_hosts that does not list it")
	} else if !errors.Is(err, errkind.FailedPrecondition) {
		t.Errorf("unknown host key through the jump host: %v, want FailedPrecondition", err)
	}
}
