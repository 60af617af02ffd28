package metal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/hamaster/hamaster/dns"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal/vip"
	"github.com/hamaster/hamaster/remote"
)

// Name is the provider's registry name.
const Name = "metal"

// Options (providers.Settings.Options).
const (
	// OptInventory is the inventory file (required).
	OptInventory = "metal-inventory"
	// OptVIP overrides the inventory's vip.
	OptVIP = "metal-vip"
	// SSH to the hosts: each host's user and port are the inventory's.
	OptSSHKey        = "ssh-key"
	OptSSHKnownHosts = "ssh-known-hosts"
	OptSSHInsecure   = "ssh-insecure-skip-host-key-check"
	OptSSHAgent      = "ssh-agent-socket"
	// OptVIPPort is the port HAProxy serves the cluster endpoint on,
	// VIP:port (default vip.DefaultFrontendPort, 8443).
	OptVIPPort = "metal-vip-port"
)

// Provider is the bare-metal provider bound to one cluster: the
// inventory's control-plane hosts are its machines. Hosts are never
// created, re-imaged or powered off: a new replica claims a free host
// (Instances.Create writes the claim on the host), and deleting a
// replica releases it, refusing while the host still runs a control
// plane or keeps etcd data (the flavor's leave, kubeadm reset, comes
// first).
type Provider struct {
	cluster  string
	stateDir string
	inv      *Inventory
	opts     map[string]string
	log      *slog.Logger
	dnsOut   io.Writer
	apiPort  int
	vipPort  int
	// execFor, when set (tests), reaches the hosts instead of SSH.
	execFor func(host string) vip.Executor

	mu  sync.Mutex
	ssh map[string]*remote.Client // host name → connection

	probes probeCache
}

var (
	_ providers.Provider        = (*Provider)(nil)
	_ providers.MachineDialer   = (*Provider)(nil)
	_ providers.APIServerPorter = (*Provider)(nil)
	_ providers.MasterFormatter = (*Provider)(nil)
	_ providers.EndpointPorter  = (*Provider)(nil)
)

// MasterFormat implements providers.MasterFormatter: the masters on
// bare-metal hosts are kubeadm's (the only kind the metal provider
// serves: hamaster's own masters are the local provider's, kube-up's the
// clouds').
func (*Provider) MasterFormat() string { return "kubeadm" }

// New opens the provider: the inventory is loaded and validated, and the
// SSH settings checked, before anything is dialed.
func New(_ context.Context, s providers.Settings) (providers.Provider, error) {
	o := s.Options
	path := o[OptInventory]
	if path == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: required with the metal provider: the YAML file listing the hosts (see docs/metal.md)", OptInventory)
	}
	inv, err := Load(path)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %w", OptInventory, err)
	}
	if v := o[OptVIP]; v != "" {
		inv.VIP = v
		if err := inv.Validate(); err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s %q: %w", OptVIP, v, err)
		}
	}
	if len(inv.ControlPlaneHosts()) == 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s %s: no host has role %s: a master needs one", OptInventory, path, RoleControlPlane)
	}
	if o[OptSSHKey] == "" && o[OptSSHAgent] == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: required with the metal provider (or an SSH agent): hamaster reaches every host over SSH", OptSSHKey)
	}
	vipPort := vip.DefaultFrontendPort
	if v := o[OptVIPPort]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 || n == providers.APIServerPort {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s %q: want a TCP port 1..65535 other than the apiservers' %d (HAProxy listens on it on every master's addresses; default %d)", OptVIPPort, v, providers.APIServerPort, vip.DefaultFrontendPort)
		}
		vipPort = n
	}
	if s.Cluster == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--cluster: required")
	}
	log := s.Log()
	return &Provider{cluster: s.Cluster, stateDir: filepath.Join(s.StateDir, s.Cluster), inv: inv, opts: o, log: log, dnsOut: s.Out,
		apiPort: providers.APIServerPort, vipPort: vipPort, ssh: map[string]*remote.Client{}}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return Name }

// Inventory is the provider's inventory.
func (p *Provider) Inventory() *Inventory { return p.inv }

// Instances implements providers.Provider.
func (p *Provider) Instances() providers.Instances { return &instances{p: p} }

// StaticIP implements providers.Provider: the inventory's VIP (lb.go),
// unattached until the load balancer (keepalived) holds it.
func (p *Provider) StaticIP() lb.StaticIP { return staticIP{p} }

// LoadBalancer implements providers.Provider: keepalived and HAProxy on
// every master behind the VIP (lb.go, package vip).
func (p *Provider) LoadBalancer() lb.LoadBalancer { return loadBalancer{p} }

// EndpointPort implements providers.EndpointPorter: HAProxy's port on
// the VIP (--metal-vip-port, default 8443): the apiservers hold 6443 on
// every address, so HAProxy beside them needs another (kubeadm's
// docs/ha-considerations.md uses 8443).
func (p *Provider) EndpointPort() int { return p.vipPort }

// DNS implements providers.Provider: static records only (the operator's
// own DNS points at the VIP).
func (p *Provider) DNS(kind string) (dns.Records, error) {
	if kind == "" || kind == "static" {
		return dns.NewStatic(p.dnsOut), nil
	}
	return nil, errkind.Errorf(errkind.InvalidArgument, "--dns: %q is not available with the metal provider (valid: static)", kind)
}

// APIServerURL implements providers.Provider.
func (p *Provider) APIServerURL(r providers.Replica) string {
	return "https://" + net.JoinHostPort(r.Address, strconv.Itoa(p.apiPort))
}

// APIServerPort implements providers.APIServerPorter.
func (p *Provider) APIServerPort() int { return p.apiPort }

// SetAPIServerPort implements providers.APIServerPorter: the flavor's.
func (p *Provider) SetAPIServerPort(port int) { p.apiPort = port }

// MachineHostname implements providers.MachineDialer: a host's name is
// its hostname and its Node's name.
func (p *Provider) MachineHostname(replica, _ string) string {
	if _, err := p.inv.Host(replica); err != nil {
		return ""
	}
	return replica
}

// DialMachine implements providers.MachineDialer: a TCP connection opened
// by the host's sshd.
func (p *Provider) DialMachine(ctx context.Context, machine, addr string) (net.Conn, error) {
	c, err := p.client(ctx, machine)
	if err != nil {
		return nil, err
	}
	conn, err := c.DialContext(ctx, "tcp", addr)
	if err != nil {
		p.dropIfEnded(machine, c)
		return nil, fmt.Errorf("host %s: dial %s: %w", machine, addr, err)
	}
	return conn, nil
}

// RunOnMachine runs cmd (a POSIX sh command line) on the host as its
// inventory's SSH user, returning stdout and stderr (remote.Client.Run).
// A command not marked providers.ReadOnly drops what was last probed on
// the host.
func (p *Provider) RunOnMachine(ctx context.Context, machine, cmd string) (stdout, stderr []byte, err error) {
	if !providers.IsReadOnly(ctx) {
		p.probes.changed(machine)
		defer p.probes.changed(machine)
	}
	return p.run(ctx, machine, cmd)
}

// run is RunOnMachine keeping the host's probe.
func (p *Provider) run(ctx context.Context, machine, cmd string) (stdout, stderr []byte, err error) {
	c, err := p.client(ctx, machine)
	if err != nil {
		return nil, nil, err
	}
	stdout, stderr, err = c.Run(ctx, cmd)
	if err != nil {
		p.dropIfEnded(machine, c)
		return stdout, stderr, fmt.Errorf("host %s: %w", machine, err)
	}
	return stdout, stderr, nil
}

// ping checks, within probeTimeout, that machine still answers on the
// connection kept to it (remote.Client.Ping); a connection that has
// ended is forgotten.
func (p *Provider) ping(ctx context.Context, machine string) error {
	p.mu.Lock()
	c := p.ssh[machine]
	p.mu.Unlock()
	if c == nil {
		return errkind.Errorf(errkind.Unavailable, "host %s: no connection", machine)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		p.dropIfEnded(machine, c)
		return fmt.Errorf("host %s: %w", machine, err)
	}
	return nil
}

// UploadToMachine writes data to path on the host atomically
// (remote.Client.Upload).
func (p *Provider) UploadToMachine(ctx context.Context, machine, path string, data []byte, mode os.FileMode) error {
	p.probes.changed(machine)
	defer p.probes.changed(machine)
	return p.upload(ctx, machine, path, data, mode)
}

func (p *Provider) upload(ctx context.Context, machine, path string, data []byte, mode os.FileMode) error {
	c, err := p.client(ctx, machine)
	if err != nil {
		return err
	}
	if err := c.Upload(ctx, path, data, mode); err != nil {
		return fmt.Errorf("host %s: %w", machine, err)
	}
	return nil
}

// client is the SSH connection to the host named machine, dialed on
// first use and kept until Close.
func (p *Provider) client(ctx context.Context, machine string) (*remote.Client, error) {
	h, err := p.inv.Host(machine)
	if err != nil {
		return nil, errkind.Errorf(errkind.NotFound, "host %s: %w", machine, err)
	}
	p.mu.Lock()
	c := p.ssh[machine]
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err = remote.Dial(ctx, remote.Config{
		Addr: h.SSHAddr(), User: h.SSH.User, KeyFile: p.opts[OptSSHKey], AgentSocket: p.opts[OptSSHAgent],
		KnownHostsFile: p.opts[OptSSHKnownHosts], InsecureSkipHostKeyCheck: p.opts[OptSSHInsecure] == "true", Logger: p.log,
		Sudo: h.SSH.User != "root",
	})
	if err != nil {
		return nil, fmt.Errorf("host %s (ssh %s@%s): %w", machine, h.SSH.User, h.SSHAddr(), err)
	}
	// Every change is made through this connection, whose first
	// command checks sudo (remote.Client.Run): a login that cannot
	// become root is refused there, before any change, at no session's
	// cost when it can.
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.ssh[machine]; old != nil {
		c.Close()
		return old, nil
	}
	p.ssh[machine] = c
	return c, nil
}

// dropIfEnded forgets machine's connection c once it has ended, so the
// next call dials again; a failure on a live connection (a refused
// tunnel: a member restarting; a command's context ending) keeps it, and
// the commands still running on it (a kubeadm upgrade) go on. Only c is
// forgotten: a newer connection another call dialled meanwhile stays
// (closing it would end the commands running on it).
func (p *Provider) dropIfEnded(machine string, c *remote.Client) {
	if c.Err() == nil {
		return
	}
	p.probes.changed(machine)
	p.mu.Lock()
	if p.ssh[machine] == c {
		delete(p.ssh, machine)
	}
	p.mu.Unlock()
	c.Close()
}

// Close implements providers.Provider.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, c := range p.ssh {
		c.Close()
		delete(p.ssh, name)
	}
	return nil
}

var _ providers.WorkerLister = (*Provider)(nil)

// Workers implements providers.WorkerLister: the inventory's role:
// worker hosts, in its order.
func (p *Provider) Workers(context.Context) ([]providers.Worker, error) {
	var out []providers.Worker
	for _, h := range p.inv.Hosts {
		if h.Role == RoleWorker {
			out = append(out, providers.Worker{Name: h.Name, Address: h.Address})
		}
	}
	return out, nil
}
