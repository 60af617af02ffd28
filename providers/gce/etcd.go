package gce

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Etcd implements providers.Provider: the main etcd cluster.
func (p *Provider) Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error) {
	return p.EtcdCluster(ctx, providers.EtcdMain, exclude...)
}

// EtcdClusters implements providers.Membership: a kube-up master runs
// two etcd clusters (configure-helper.sh start-etcd-servers).
func (p *Provider) EtcdClusters() []string {
	return []string{providers.EtcdMain, providers.EtcdEvents}
}

// kubeUpCluster is the kube-up etcd cluster named c.
func kubeUpCluster(c string) (kubeenv.EtcdCluster, error) {
	switch c {
	case providers.EtcdMain:
		return kubeenv.EtcdMain, nil
	case providers.EtcdEvents:
		return kubeenv.EtcdEvents, nil
	}
	return kubeenv.EtcdCluster{}, fmt.Errorf("etcd cluster %q: kube-up masters run %q and %q", c, providers.EtcdMain, providers.EtcdEvents)
}

// EtcdMember implements providers.Membership: kube-up's member etcd-<hostname>
// with peer URL https://<hostname>:<peer port> (etcd.manifest --name and
// --initial-advertise-peer-urls; a GCE instance's hostname is its name,
// which the VPC's internal DNS resolves).
func (p *Provider) EtcdMember(cluster, replica, _ string) (string, string) {
	c, err := kubeUpCluster(cluster)
	if err != nil {
		c = kubeenv.EtcdMain // EtcdClusters never names another
	}
	return kubeenv.MemberName(replica), kubeenv.PeerURL(c, replica)
}

// EtcdCluster implements providers.Membership. kube-up masters serve etcd
// on 127.0.0.1 only (etcd.manifest --listen-client-urls
// <proto>://127.0.0.1:<port>), so hamaster reaches each member as kube-up
// does (util.sh add-replica-to-etcd → run-gcloud-command: `gcloud compute
// ssh` to the master): an SSH connection to the master's external
// address, checked against known_hosts, and a tunnel from there to its
// own 127.0.0.1. The operator never needs a route into the VPC.
//
// Every member advertises the same loopback client URL, so the client is
// told to reach member etcd-<host> at <host>:<port> and the dialer opens
// that through an SSH connection to master <host>: each member's status
// comes from its own master. Main etcd's client port uses mutual TLS
// with ETCD_APISERVER_CA (create-etcd-apiserver-certs); hamaster presents
// a client certificate of its own signed by that CA, made in memory from
// a running master's kube-master-certs. The events cluster is plain http
// on 127.0.0.1:4002 (prepare-etcd-manifest).
func (p *Provider) EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error) {
	c, err := kubeUpCluster(cluster)
	if err != nil {
		return nil, err
	}
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
		if r.Running() && !skip[r.Name] {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no running master to reach etcd %s through (excluding %v)", p.cluster, cluster, exclude)
	}
	scheme, tlsCfg, err := p.etcdClientTLS(c, cands[0])
	if err != nil {
		return nil, err
	}
	cfg := etcdmember.Config{TLS: tlsCfg, Logger: p.log, DialContext: p.dialMaster,
		ClientURLs: func(m etcdmember.Member) []string {
			host := kubeenv.HostOfMember(m.Name)
			if host == "" {
				return m.ClientURLs
			}
			out := make([]string, 0, len(m.ClientURLs))
			for _, raw := range m.ClientURLs {
				u, err := url.Parse(raw)
				if err != nil {
					continue
				}
				u.Host = net.JoinHostPort(host, u.Port())
				out = append(out, u.String())
			}
			return out
		}}
	// Every candidate is an endpoint: when the master a connection goes
	// through is recreated (a rolling upgrade), the client fails over to
	// another, and the cluster lock's lease keeps being renewed.
	for _, r := range cands {
		cfg.Endpoints = append(cfg.Endpoints, scheme+"://"+net.JoinHostPort(r.Name, strconv.Itoa(c.ClientPort)))
	}
	cli, err := etcdmember.New(ctx, cfg)
	if err != nil {
		for _, r := range cands {
			p.dropSSH(r.Name)
		}
		return nil, errkind.Errorf(errkind.Unavailable, "cluster %s: no master's etcd %s reachable over SSH: %w", p.cluster, cluster, err)
	}
	return cli, nil
}

// etcdClientTLS is how hamaster talks to cluster c's client port on
// kube-up masters: https with a client certificate when the master has
// ETCD_APISERVER_* material (the main cluster), plain http otherwise.
func (p *Provider) etcdClientTLS(c kubeenv.EtcdCluster, r providers.Replica) (string, *tls.Config, error) {
	m, err := kubeUpMaster(r.Template)
	if err != nil {
		return "", nil, fmt.Errorf("master %s: %w", r.Name, err)
	}
	if c.Suffix != "" || !m.HasEtcdAPIServerTLS() {
		return "http", nil, nil
	}
	ca, err := m.EtcdAPIServerCA()
	if err != nil {
		return "", nil, fmt.Errorf("master %s: %w", r.Name, err)
	}
	pair, err := ca.IssueClient("hamaster", nil, certs.ECDSA)
	if err != nil {
		return "", nil, fmt.Errorf("issue hamaster's etcd client certificate from %s: %w", kubeenv.EtcdAPIServerCACert, err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return "", nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	// Each master's etcd serving certificate covers 127.0.0.1, where the
	// tunnel ends (create-etcd-apiserver-certs), not the name it is dialed by.
	return "https", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, nil
}

// kubeUpMaster is a replica's template as kube-up's two metadata items.
func kubeUpMaster(t providers.Template) (kubeenv.Master, error) {
	m := kubeenv.Master{Env: map[string]string{}, Certs: map[string]string{}}
	for k, v := range t.Env {
		m.Env[k] = v
	}
	for k, v := range t.Files {
		if kubeUpKeyRE.MatchString(k) {
			m.Certs[k] = base64.StdEncoding.EncodeToString(v)
		}
	}
	if m.Env[kubeenv.EtcdCACert] == "" {
		return m, errkind.Errorf(errkind.FailedPrecondition, "its kube-env has no %s: not a master kube-up built (cluster/gce/util.sh create-master writes the etcd CA into kube-env)", kubeenv.EtcdCACert)
	}
	return m, nil
}

// dialMaster opens addr ("<master>:<port>", as the client's endpoints and
// ClientURLs name members) as 127.0.0.1:<port> on that master, through an
// SSH connection to its external address.
func (p *Provider) dialMaster(ctx context.Context, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ext, err := p.externalIP(ctx, host)
	if err != nil {
		return nil, err
	}
	c, err := p.sshTo(ctx, host, ext)
	if err != nil {
		return nil, fmt.Errorf("ssh %s (%s): %w", host, ext, err)
	}
	conn, err := c.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		p.dropSSH(host)
	}
	return conn, err
}

// sshTo returns the provider's SSH connection to master name at its
// external address ext, dialing it on first use (and again when the
// address changed: the static IP moved to the LB). Connections are kept
// until Close: an etcd client may still use its tunnels.
func (p *Provider) sshTo(ctx context.Context, name, ext string) (*remote.Client, error) {
	port := p.opts[OptSSHPort]
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
	c, err := remote.Dial(ctx, remote.Config{
		Addr: addr, User: p.opts[OptSSHUser], KeyFile: p.opts[OptSSHKey], AgentSocket: p.opts[OptSSHAgent],
		KnownHostsFile: p.opts[OptSSHKnownHosts], InsecureSkipHostKeyCheck: p.opts[OptSSHInsecure] == "true", Logger: p.log,
	})
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
