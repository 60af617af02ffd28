package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/errkind"
)

// DialContext opens a TCP connection from the remote host to addr (a
// direct-tcpip channel, as ssh -L makes): addr is resolved and dialled by
// the master's sshd, so "127.0.0.1:2379" is the master's own etcd. network
// must be "tcp", "tcp4" or "tcp6". The connection's addresses are zero and
// it does not support deadlines.
//
// Errors: errkind.Unavailable when the remote host cannot connect to addr
// or the SSH connection has ended (closed, lost, or found dead by a
// keepalive); errkind.FailedPrecondition when sshd forbids the tunnel
// (AllowTcpForwarding, PermitOpen); ctx's error when it ends first.
func (c *Client) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh tunnel via %s to %s: network %q is not tcp", c.addr, addr, network)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh tunnel via %s: %w", c.addr, err)
	}
	if err := c.endErr(); err != nil {
		return nil, fmt.Errorf("ssh tunnel to %s: %w", addr, err)
	}
	conn, err := c.ssh.DialContext(ctx, network, addr)
	if err == nil {
		return conn, nil
	}
	var open *ssh.OpenChannelError
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("ssh tunnel via %s to %s: %w", c.addr, addr, ctx.Err())
	case errors.As(err, &open) && open.Reason == ssh.Prohibited:
		return nil, errkind.Errorf(errkind.FailedPrecondition, "ssh tunnel via %s to %s: sshd forbids it (AllowTcpForwarding / PermitOpen in its sshd_config): %w", c.addr, addr, err)
	case errors.As(err, &open):
		return nil, errkind.Errorf(errkind.Unavailable, "ssh tunnel via %s to %s: %w", c.addr, addr, err)
	}
	if end := c.waitEnd(time.Second); end != nil {
		return nil, fmt.Errorf("ssh tunnel to %s: %w", addr, end)
	}
	return nil, errkind.Errorf(errkind.Unavailable, "ssh tunnel via %s to %s: %w", c.addr, addr, err)
}

// EtcdDialer adapts DialContext to etcdmember.Config.DialContext: every
// connection the etcd client makes (to the endpoints and to the members'
// advertised client URLs) is opened by the remote host.
func (c *Client) EtcdDialer() func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return c.DialContext(ctx, "tcp", addr)
	}
}
