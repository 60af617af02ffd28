package gce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Etcd implements providers.Provider. Without SSH options it dials the
// members' client URLs directly (tests, or masters whose etcd listens on
// the internal address). With ssh-user it opens an SSH connection to the
// first running replica not excluded that accepts it — on the master's
// external address, as kube-up's `gcloud compute ssh` does (util.sh
// add-replica-to-etcd → run-gcloud-command), so the operator never needs a
// route into the VPC — and tunnels every etcd connection through it: on
// kube-up masters etcd listens on 127.0.0.1 only.
func (p *Provider) Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error) {
	rs, err := p.inst.List(ctx)
	if err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, e := range exclude {
		skip[e] = true
	}
	var cands []providers.Replica
	for _, r := range rs {
		if r.Running() && !skip[r.Name] && r.Address != "" {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no running replica to reach etcd through (excluding %v)", p.cluster, exclude)
	}
	if p.opts[OptSSHUser] == "" {
		return providers.OperatorEtcd(ctx, p.stateDir, p.cluster, cands, nil, p.log)
	}
	crt, key, err := providers.OperatorClientCert(p.stateDir, p.cluster)
	if err != nil {
		return nil, err
	}
	cfg := etcdmember.Config{CACert: p.pki("ca.crt"), Cert: crt, Key: key, Logger: p.log}
	port := p.opts[OptSSHPort]
	if port == "" {
		port = "22"
	}
	var errs []error
	for _, r := range cands {
		ext, err := p.externalIP(ctx, r.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.Address = ext
		c, err := p.sshTo(ctx, r, port)
		if err != nil {
			errs = append(errs, fmt.Errorf("ssh %s: %w", r.Name, err))
			continue
		}
		ep := p.opts[OptSSHEtcdEndpoint]
		if ep == "" {
			ep = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(providers.EtcdClientPort))
		}
		cfg.Endpoints = []string{ep}
		cfg.DialContext = c.EtcdDialer()
		cli, err := etcdmember.New(ctx, cfg)
		if err != nil {
			p.dropSSH(r.Name)
			errs = append(errs, fmt.Errorf("etcd through ssh %s: %w", r.Name, err))
			continue
		}
		return cli, nil
	}
	return nil, errkind.Errorf(errkind.Unavailable, "cluster %s: no replica reachable over SSH for etcd: %w", p.cluster, errors.Join(errs...))
}

// sshTo returns the provider's SSH connection to a replica, dialing it on
// first use. Connections are kept until Close (an etcd client returned by
// Etcd may still use its tunnel).
func (p *Provider) sshTo(ctx context.Context, r providers.Replica, port string) (*remote.Client, error) {
	p.mu.Lock()
	c := p.ssh[r.Name]
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := remote.Dial(ctx, remote.Config{
		Addr: net.JoinHostPort(r.Address, port), User: p.opts[OptSSHUser], KeyFile: p.opts[OptSSHKey], AgentSocket: p.opts[OptSSHAgent],
		KnownHostsFile: p.opts[OptSSHKnownHosts], InsecureSkipHostKeyCheck: p.opts[OptSSHInsecure] == "true", Logger: p.log,
	})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.ssh[r.Name]; old != nil {
		c.Close()
		return old, nil
	}
	p.ssh[r.Name] = c
	p.closers = append(p.closers, c)
	return c, nil
}

func (p *Provider) dropSSH(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ssh, name) // closed with the provider
}

// externalIP is the replica's external (NAT) address: the static IP while
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
