package aws

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// SSH options: remote's (remote.OptUser turns the SSH path on) and the
// aws provider's own.
const (
	// OptSSHEtcdEndpoint is etcd's client URL as the master sees it
	// (default https://127.0.0.1:2379: kube-up masters listen there).
	OptSSHEtcdEndpoint = "ssh-etcd-endpoint"
	// OptSSHBastion is a bastion's sshd, host[:port] (same user and key):
	// hamaster jumps through it (ssh -J) to each master's private address.
	// Without it, hamaster connects to the master's public address (the
	// Elastic IP on master 0).
	OptSSHBastion = "aws-ssh-bastion"
)

// sshEnabled reports whether etcd is reached over SSH.
func (p *Provider) sshEnabled() bool { return p.opts[remote.OptUser] != "" }

// sshConfig is the remote.Config for addr, through via when set.
func (p *Provider) sshConfig(addr string, via *remote.Client) remote.Config {
	c := remote.ConfigFromOptions(p.opts, addr)
	c.Logger, c.Via = p.log, via
	return c
}

// sshDial returns the provider's SSH connection to addr (through the
// bastion when given), dialing it on first use; connections live until
// Close (an etcd client may still use its tunnel).
func (p *Provider) sshDial(ctx context.Context, addr string, viaBastion bool) (*remote.Client, error) {
	key := addr
	if viaBastion {
		key = "via-bastion/" + addr
	}
	p.sshMu.Lock()
	c := p.ssh[key]
	p.sshMu.Unlock()
	if c != nil {
		return c, nil
	}
	var via *remote.Client
	if viaBastion {
		b, err := p.sshDial(ctx, p.opts[OptSSHBastion], false)
		if err != nil {
			return nil, fmt.Errorf("bastion %s (--%s): %w", p.opts[OptSSHBastion], OptSSHBastion, err)
		}
		via = b
	}
	c, err := remote.Dial(ctx, p.sshConfig(addr, via))
	if err != nil {
		if via != nil {
			p.sshForget(p.opts[OptSSHBastion], via) // the bastion's connection may be the dead one
		}
		return nil, err
	}
	p.sshMu.Lock()
	defer p.sshMu.Unlock()
	if old := p.ssh[key]; old != nil {
		c.Close()
		return old, nil
	}
	p.ssh[key] = c
	return c, nil
}

// sshForget takes c (the cached connection to key) out of the cache
// without closing it, so the next dial makes a new one: a connection
// through which a dial failed may have ended (the instance behind the
// address was replaced), while etcd clients may still use its other
// tunnels. Close closes it with the rest.
func (p *Provider) sshForget(key string, c *remote.Client) {
	p.sshMu.Lock()
	defer p.sshMu.Unlock()
	for _, k := range []string{key, "via-bastion/" + key} {
		if p.ssh[k] == c {
			delete(p.ssh, k)
			p.sshRetired = append(p.sshRetired, c)
		}
	}
}

// sshDialThrough opens target (host:port as the master or bastion sees
// it) through the SSH connection to addr, forgetting that connection
// when the dial fails.
func (p *Provider) sshDialThrough(ctx context.Context, addr string, viaBastion bool, network, target string) (net.Conn, error) {
	c, err := p.sshDial(ctx, addr, viaBastion)
	if err != nil {
		return nil, err
	}
	conn, err := c.DialContext(ctx, network, target)
	if err != nil {
		p.sshForget(addr, c)
	}
	return conn, err
}

func (p *Provider) sshDrop(addr string) {
	p.sshMu.Lock()
	defer p.sshMu.Unlock()
	for _, k := range []string{addr, "via-bastion/" + addr} {
		if c := p.ssh[k]; c != nil {
			c.Close()
			delete(p.ssh, k)
		}
	}
}

// sshAddress is where hamaster's SSH reaches a master: its private
// address through the bastion, else its public address.
func (p *Provider) sshAddress(i instance) (string, bool, error) {
	port := p.opts[remote.OptPort]
	if port == "" {
		port = "22"
	}
	if p.opts[OptSSHBastion] != "" {
		return net.JoinHostPort(i.address, port), true, nil
	}
	pub := aws.ToString(i.raw.PublicIpAddress)
	if pub == "" {
		return "", false, errkind.Errorf(errkind.FailedPrecondition, "master %s (%s) has no public address: give a bastion with --%s (hamaster never routes to a private address from outside the VPC)", i.name, i.id, OptSSHBastion)
	}
	return net.JoinHostPort(p.amap.toNet(pub), port), false, nil
}

// etcdOverSSH connects to etcd through the first candidate master that
// accepts SSH, tunnelling every etcd connection through it (kube-up's
// add-replica-to-etcd runs curl on the master itself: cluster/gce/util.sh;
// its AWS masters have etcd on 127.0.0.1 too).
func (p *Provider) etcdOverSSH(ctx context.Context, cands []instance) (*etcdmember.Client, error) {
	crt, key, err := providers.OperatorClientCert(p.stateDir, p.cluster)
	if err != nil {
		return nil, err
	}
	ep := p.opts[OptSSHEtcdEndpoint]
	if ep == "" {
		ep = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(providers.EtcdClientPort))
	}
	cfg := etcdmember.Config{CACert: filepath.Join(providers.PKIDir(p.stateDir, p.cluster), "ca.crt"), Cert: crt, Key: key, Logger: p.log, Endpoints: []string{ep}}
	var errs []error
	for _, i := range cands {
		addr, viaBastion, err := p.sshAddress(i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := p.sshDial(ctx, addr, viaBastion)
		if err != nil {
			errs = append(errs, fmt.Errorf("ssh %s (%s): %w", i.name, addr, err))
			continue
		}
		cfg.DialContext = c.EtcdDialer()
		cli, err := etcdmember.New(ctx, cfg)
		if err != nil {
			p.sshDrop(addr)
			errs = append(errs, fmt.Errorf("etcd through ssh %s: %w", i.name, err))
			continue
		}
		return cli, nil
	}
	return nil, errkind.Errorf(errkind.Unavailable, "cluster %s: no master reachable over SSH for etcd: %w", p.cluster, errors.Join(errs...))
}

// closeSSH closes every SSH connection.
func (p *Provider) closeSSH() error {
	p.sshMu.Lock()
	defer p.sshMu.Unlock()
	var errs []error
	for k, c := range p.ssh {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
		delete(p.ssh, k)
	}
	for _, c := range p.sshRetired {
		_ = c.Close() // most have ended already
	}
	p.sshRetired = nil
	return errors.Join(errs...)
}

// DialAPIServer implements providers.APIServerDialer: without --ssh-user
// a direct dial (the operator is inside the VPC); with it, the bastion's
// sshd (--aws-ssh-bastion) or a running master's (on its public address)
// opens the connection, inside the VPC — the workflows' /readyz and
// /version probes never route to a private address from outside.
func (p *Provider) DialAPIServer(ctx context.Context, network, addr string) (net.Conn, error) {
	if !p.sshEnabled() {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	if b := p.opts[OptSSHBastion]; b != "" {
		conn, err := p.sshDialThrough(ctx, b, false, network, addr)
		if err != nil {
			return nil, fmt.Errorf("bastion %s (--%s): %w", b, OptSSHBastion, err)
		}
		return conn, nil
	}
	is, err := p.inst.describe(ctx, "")
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, i := range is {
		if i.state != providers.StateRunning {
			continue
		}
		a, via, err := p.sshAddress(i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		conn, err := p.sshDialThrough(ctx, a, via, network, addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("ssh %s (%s): %w", i.name, a, err))
			continue
		}
		return conn, nil
	}
	return nil, errkind.Errorf(errkind.Unavailable, "cluster %s: no master reachable over SSH to reach apiserver %s through: %w", p.cluster, addr, errors.Join(errs...))
}

var _ providers.APIServerDialer = (*Provider)(nil)
