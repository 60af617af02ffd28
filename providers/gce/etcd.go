package gce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// The provider's way into its masters (providers.MachineDialer): kube-up
// masters serve etcd on 127.0.0.1 only (etcd.manifest
// --listen-client-urls <proto>://127.0.0.1:<port>), and kube-up reaches
// them with `gcloud compute ssh` (util.sh add-replica-to-etcd →
// run-gcloud-command): an SSH connection to the master's external
// address, checked against known_hosts, and a tunnel from there to its
// own 127.0.0.1. The operator never needs a route into the VPC.
var (
	_ providers.MachineDialer   = (*Provider)(nil)
	_ providers.MasterFormatter = (*Provider)(nil)
)

// MasterFormat implements providers.MasterFormatter: the flavor named
// or recorded (Settings.Flavor), else kube-up's (the provider finds
// masters named as kube-up names them: instances.isMasterName).
func (p *Provider) MasterFormat() string {
	return cmp.Or(p.flavor, MasterFormatKubeUp)
}

// MachineHostname implements providers.MachineDialer: a GCE instance's
// hostname is its name, which the VPC's internal DNS resolves.
func (p *Provider) MachineHostname(replica, _ string) string { return replica }

// DialMachine implements providers.MachineDialer: addr (its own
// 127.0.0.1:<port>) as master machine sees it, through an SSH connection
// to its external address.
func (p *Provider) DialMachine(ctx context.Context, machine, addr string) (net.Conn, error) {
	ext, err := p.externalIP(ctx, machine)
	if err != nil {
		return nil, err
	}
	c, err := p.sshTo(ctx, machine, ext)
	if err != nil {
		return nil, fmt.Errorf("ssh %s (%s): %w", machine, ext, err)
	}
	conn, err := c.DialContext(ctx, "tcp", addr)
	if err != nil {
		p.dropSSH(machine)
	}
	return conn, err
}

// RunOnMachine implements providers.MachineRunner: cmd run by the
// master's sshd at its external address, as `gcloud compute ssh NAME
// --command` runs it.
func (p *Provider) RunOnMachine(ctx context.Context, machine, cmd string) ([]byte, []byte, error) {
	ext, err := p.externalIP(ctx, machine)
	if err != nil {
		return nil, nil, err
	}
	c, err := p.sshTo(ctx, machine, ext)
	if err != nil {
		return nil, nil, fmt.Errorf("ssh %s (%s): %w", machine, ext, err)
	}
	stdout, stderr, err := c.Run(ctx, cmd)
	if err != nil {
		var exit *remote.ExitError
		if !errors.As(err, &exit) {
			p.dropSSH(machine)
		}
		return stdout, stderr, fmt.Errorf("master %s: %w", machine, err)
	}
	return stdout, stderr, nil
}

// sshTo returns the provider's SSH connection to master name at its
// external address ext, dialing it on first use (and again when the
// address changed: the static IP moved to the LB). Connections are kept
// until Close: an etcd client may still use its tunnels.
func (p *Provider) sshTo(ctx context.Context, name, ext string) (*remote.Client, error) {
	port := p.opts[remote.OptPort]
	if port == "" {
		port = "22"
	}
	addr := net.JoinHostPort(ext, port)
	p.mu.Lock()
	c := p.ssh[name]
	p.mu.Unlock()
	if c != nil && c.Addr() == addr {
		return c, nil
	}
	cfg := remote.ConfigFromOptions(p.opts, addr)
	cfg.Logger = p.log
	c, err := remote.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.ssh[name]; old != nil && old.Addr() == addr {
		c.Close()
		return old, nil
	}
	p.ssh[name] = c
	p.closers = append(p.closers, c)
	return c, nil
}

func (p *Provider) dropSSH(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ssh, name) // closed with the provider
}

// closeSSH closes the connection to master name now: its external address
// changed (the static IP moved), so the connection is dead but would be
// noticed only by keepalives, while the etcd clients tunnelled through it
// (the cluster lock's lease among them) stall. Closed, their next dial
// finds the master at its new address.
func (p *Provider) closeSSH(name string) {
	p.mu.Lock()
	c := p.ssh[name]
	delete(p.ssh, name)
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// externalIP is the master's external (NAT) address: the static IP while
// it holds it, else its ephemeral one (kube-up gives every master one).
func (p *Provider) externalIP(ctx context.Context, name string) (string, error) {
	x, _, err := p.inst.getRaw(ctx, name)
	if err != nil {
		return "", err
	}
	for _, nic := range x.GetNetworkInterfaces() {
		for _, ac := range nic.GetAccessConfigs() {
			if ip := ac.GetNatIP(); ip != "" {
				return ip, nil
			}
		}
	}
	return "", errkind.Errorf(errkind.FailedPrecondition, "master %s has no external IP: hamaster reaches etcd over SSH to a master's external address and never routes into the VPC", name)
}
