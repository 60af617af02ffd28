package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/dns"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/internal/nodebin"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// Name is the registry name of this provider.
const Name = "local"

// Option keys understood in providers.Settings.Options.
const (
	// OptNodeBinary is the path of hamaster-node (default: next to the
	// running executable, then $PATH).
	OptNodeBinary = "node-binary"
	// OptSubnet forces N of 127.0.N.0/24 or 198.19.N.0/24 (default:
	// derived from the name).
	OptSubnet = "subnet"
)

// Provider is the local provider bound to one cluster.
type Provider struct {
	cluster string
	l       layout
	info    ClusterInfo
	opts    map[string]string
	log     *slog.Logger
	mu      sync.Mutex
	inst    *instances
	dnsOut  io.Writer
}

// New is the providers.Factory of the local provider. The cluster must
// exist (see Up).
func New(_ context.Context, s providers.Settings) (providers.Provider, error) {
	p, err := open(s)
	if err != nil {
		return nil, err
	}
	if p.info, err = readClusterInfo(p.l, s.Cluster); err != nil {
		return nil, err
	}
	return p, nil
}

func open(s providers.Settings) (*Provider, error) {
	if s.Cluster == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--cluster: required")
	}
	if s.StateDir == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--state-dir: required")
	}
	p := &Provider{cluster: s.Cluster, l: layout{dir: filepath.Join(s.StateDir, s.Cluster)}, opts: s.Options, log: s.Log(), dnsOut: s.Out}
	if p.dnsOut == nil {
		p.dnsOut = io.Discard
	}
	if p.opts == nil {
		p.opts = map[string]string{}
	}
	p.inst = &instances{p: p}
	if err := p.validateTiming(); err != nil {
		return nil, err
	}
	return p, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return Name }

// Instances implements providers.Provider.
func (p *Provider) Instances() providers.Instances { return p.inst }

// StaticIP implements providers.Provider.
func (p *Provider) StaticIP() lb.StaticIP { return &staticIP{p: p} }

// LoadBalancer implements providers.Provider.
func (p *Provider) LoadBalancer() lb.LoadBalancer { return &loadBalancer{p: p} }

// DNS implements providers.Provider: only the static driver exists locally.
func (p *Provider) DNS(kind string) (dns.Records, error) {
	if kind == "" || kind == "static" {
		return dns.NewStatic(p.dnsOut), nil
	}
	return nil, errkind.Errorf(errkind.InvalidArgument, "--dns: %q is not available with the local provider (valid: static)", kind)
}

// APIServerURL implements providers.Provider.
func (p *Provider) APIServerURL(r providers.Replica) string {
	return "https://" + net.JoinHostPort(r.Address, strconv.Itoa(providers.APIServerPort))
}

// Close implements providers.Provider.
func (p *Provider) Close() error { return nil }

// Info returns the cluster's record.
func (p *Provider) Info() ClusterInfo { return p.info }

var _ providers.ControlPlaneReporter = (*Provider)(nil)

// ControlPlane implements providers.ControlPlaneReporter: what the
// replicas run, "standin" (hamaster-node's apiserver stand-in) or "real"
// (kube-apiserver; local up --control-plane).
func (p *Provider) ControlPlane() string { return cmp.Or(p.info.ControlPlane, "standin") }

func (p *Provider) caFile() string { return filepath.Join(p.l.pki(), "ca.crt") }

// Etcd implements providers.Provider: mTLS to every running replica not
// excluded.
func (p *Provider) Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error) {
	rs, err := p.inst.List(ctx)
	if err != nil {
		return nil, err
	}
	return providers.OperatorEtcd(ctx, filepath.Dir(p.l.dir), p.cluster, rs, exclude, p.log)
}

// nodeBinary finds hamaster-node.
func (p *Provider) nodeBinary() (string, error) {
	return nodebin.Find(p.opts[OptNodeBinary], "--node-binary")
}

// UpOptions describe the single master 'local up' creates.
type UpOptions struct {
	// Version is master-0's control-plane version; "" is
	// DefaultStandinVersion for the stand-in and the newest version 'make
	// kube-apiserver' builds (nodeapi.NewestPinnedKubeVersion) for a real
	// control plane.
	Version   string
	ExtraArgs []string
	// Env is copied into the master's template (and so into every clone):
	// etcd tuning such as ETCD_HEARTBEAT_MS.
	Env map[string]string
	// ControlPlane is nodeapi.ControlPlaneStandin or
	// nodeapi.ControlPlaneReal, chosen at the first up for every replica
	// the cluster will have; "" keeps the recorded choice (standin for a
	// new cluster).
	ControlPlane string
	// KubeAPIServerDir holds the real apiserver binaries by version
	// ("": nodeapi.DefaultKubeAPIServerDir).
	KubeAPIServerDir string
	// Addresses is AddressesLoopback or AddressesBenchmark, chosen at the
	// first up; "" is benchmark for a real control plane, loopback for
	// the stand-in.
	Addresses string
	// Certificates issues master-0's certificates from the cluster CA, as
	// the files of its template: its flavor's (hamaster's own format,
	// flavors/hamaster.ReplicaFiles), which the command wiring gives, for
	// no provider imports a flavor. Required.
	Certificates func(ca *certs.CA, name, address string, sans certs.APIServerSANs) (map[string][]byte, error)
}

// checkAddresses validates o.Addresses before anything changes.
func (o *UpOptions) checkAddresses() error {
	switch o.Addresses {
	case "", AddressesLoopback, AddressesBenchmark:
		return nil
	}
	return errkind.Errorf(errkind.InvalidArgument, "--addresses %q: want %s (127.0.N.0/24, no privilege needed) or %s (198.19.N.0/24 added to lo, needs root; what the real kube-apiserver needs to list replicas in the kubernetes Endpoints)",
		o.Addresses, AddressesLoopback, AddressesBenchmark)
}

// DefaultStandinVersion is the version the apiserver stand-in reports
// when 'local up' is given none.
const DefaultStandinVersion = "v1.30.2"

// checkControlPlane validates o's control-plane choice before anything
// changes, and defaults o.Version: a real control plane needs a binary for
// o.Version.
func (o *UpOptions) checkControlPlane() error {
	switch o.ControlPlane {
	case "", nodeapi.ControlPlaneStandin:
		if o.Version == "" {
			o.Version = DefaultStandinVersion
		}
		return nil
	case nodeapi.ControlPlaneReal:
		if o.Version == "" {
			o.Version = nodeapi.NewestPinnedKubeVersion()
		}
	default:
		return errkind.Errorf(errkind.InvalidArgument, "--control-plane %q: want %s (hamaster-node's apiserver stand-in) or %s (kube-apiserver)", o.ControlPlane, nodeapi.ControlPlaneStandin, nodeapi.ControlPlaneReal)
	}
	if o.KubeAPIServerDir == "" {
		d, err := nodeapi.DefaultKubeAPIServerDir()
		if err != nil {
			return errkind.Errorf(errkind.InvalidArgument, "--kube-apiserver-dir: %v", err)
		}
		o.KubeAPIServerDir = d
	}
	abs, err := filepath.Abs(o.KubeAPIServerDir)
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "--kube-apiserver-dir %s: %v", o.KubeAPIServerDir, err)
	}
	o.KubeAPIServerDir = abs
	bin := nodeapi.KubeAPIServerPath(abs, o.Version)
	if _, err := os.Stat(bin); err != nil {
		var have []string
		if ents, err := os.ReadDir(abs); err == nil {
			for _, e := range ents {
				if _, err := os.Stat(nodeapi.KubeAPIServerPath(abs, e.Name())); err == nil {
					have = append(have, e.Name())
				}
			}
		}
		built := "none"
		if len(have) > 0 {
			built = strings.Join(have, ", ")
		}
		return errkind.Errorf(errkind.InvalidArgument, "--control-plane real --version %s: no kube-apiserver at %s (built here: %s); 'make kube-apiserver' builds %s (one of them: tools/kube-apiserver/build.sh VERSION), or pick a built --version",
			o.Version, bin, built, strings.Join(nodeapi.PinnedKubeVersions(), " and "))
	}
	return nil
}

// MasterName is the name of a cluster's first master.
func MasterName(cluster string) string { return cluster + "-master" }

// Up creates a single-master cluster, or finishes creating one: cluster
// record, CA and operator etcd client certificate, master-0 with the static
// IP attached, ready through the static IP. Idempotent.
func Up(ctx context.Context, s providers.Settings, o UpOptions, progress func(string)) (*Provider, error) {
	versionDefaulted := o.Version == ""
	if err := o.checkControlPlane(); err != nil {
		return nil, err
	}
	if err := o.checkAddresses(); err != nil {
		return nil, err
	}
	if o.Certificates == nil {
		return nil, fmt.Errorf("local up of cluster %s: no issuer of master-0's certificates (UpOptions.Certificates)", s.Cluster)
	}
	p, err := open(s)
	if err != nil {
		return nil, err
	}
	info, err := readClusterInfo(p.l, s.Cluster)
	if errors.Is(err, errkind.NotFound) {
		controlPlane := cmp.Or(o.ControlPlane, nodeapi.ControlPlaneStandin)
		addresses := o.Addresses
		if addresses == "" {
			addresses = AddressesLoopback
			if controlPlane == nodeapi.ControlPlaneReal {
				addresses = AddressesBenchmark
			}
		}
		if info, err = p.newClusterInfo(s, addresses); err != nil {
			return nil, err
		}
		info.ControlPlane = controlPlane
		if info.Real() {
			info.KubeAPIServerDir = o.KubeAPIServerDir
		}
		// The address on lo first: if it cannot be added (no privilege),
		// nothing has changed.
		p.info = info
		if err := p.ensureNetwork(); err != nil {
			return nil, err
		}
		if err := writeJSON(p.l.clusterFile(), info, 0o600); err != nil {
			return nil, errors.Join(err, p.removeNetwork())
		}
	} else if err != nil {
		return nil, err
	} else if have := cmp.Or(info.ControlPlane, nodeapi.ControlPlaneStandin); o.ControlPlane != "" && have != o.ControlPlane {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--control-plane %s: cluster %s runs %s (chosen when it was created; 'local down' and up again to change it)", o.ControlPlane, s.Cluster, have)
	} else if have := cmp.Or(info.Addresses, AddressesLoopback); o.Addresses != "" && have != o.Addresses {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--addresses %s: cluster %s lives in %s (%s, chosen when it was created; 'local down' and up again to change it)", o.Addresses, s.Cluster, info.Prefix(), have)
	}
	p.info = info
	if versionDefaulted && info.Real() {
		// An existing real cluster re-upped without --control-plane.
		o.Version = nodeapi.NewestPinnedKubeVersion()
	}
	progress(fmt.Sprintf("cluster %s: subnet %s, static IP %s", s.Cluster, info.Prefix(), info.StaticIP))
	ca, _, err := certs.LoadOrCreateCA(p.l.pki(), s.Cluster+"-ca", certs.ECDSA)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	if info.Real() {
		// One key for every replica: a token one apiserver issues must
		// verify on the others.
		if _, err := certs.LoadOrCreateServiceAccountKey(p.l.serviceAccountKey(), certs.ECDSA); err != nil {
			return nil, err
		}
	}
	clientCert := filepath.Join(p.l.pki(), "etcd-client.crt")
	if _, err := os.Stat(clientCert); err != nil {
		pair, err := ca.IssueClient("hamaster", nil, certs.ECDSA)
		if err != nil {
			return nil, fmt.Errorf("issue etcd client certificate: %w", err)
		}
		if err := pair.Write(clientCert, filepath.Join(p.l.pki(), "etcd-client.key")); err != nil {
			return nil, err
		}
	}
	name := MasterName(s.Cluster)
	rs, err := p.inst.List(ctx)
	if err != nil {
		return nil, err
	}
	if len(rs) > 1 {
		return p, nil // already HA: nothing of 'up' left to do
	}
	addr, err := p.inst.ReserveAddress(ctx, name, "")
	if err != nil {
		return nil, err
	}
	if r, err := p.inst.Get(ctx, name); err != nil || !r.Running() {
		progress(fmt.Sprintf("starting %s on %s", name, addr))
		files, err := o.Certificates(ca, name, addr, certs.APIServerSANs{StaticIP: info.StaticIP})
		if err != nil {
			return nil, fmt.Errorf("certificates of %s: %w", name, err)
		}
		env := map[string]string{
			nodeapi.KeyInitialEtcdCluster:      name + "=" + providers.PeerURL(addr),
			nodeapi.KeyEtcdInitialClusterState: "new",
		}
		for k, v := range o.Env {
			env[k] = v
		}
		tmpl := providers.Template{Version: o.Version, ExtraArgs: o.ExtraArgs, Env: env, Files: files, Machine: map[string]string{"kind": "hamaster-node"}}
		if err == nil && r.Name != "" {
			tmpl = r.Template // stopped: boot it again as it was
		}
		if _, err := p.inst.Create(ctx, name, "", tmpl); err != nil {
			return nil, err
		}
	}
	if exists, err := lb.Exists(ctx, p.LoadBalancer()); err != nil {
		return nil, err
	} else if !exists {
		progress(fmt.Sprintf("attaching static IP %s to %s", info.StaticIP, name))
		if err := p.StaticIP().Attach(ctx, name); err != nil {
			return nil, err
		}
	}
	progress(fmt.Sprintf("waiting for %s to be ready", name))
	statusPath := p.l.rfile(name, "status.json")
	err = poll(ctx, name+" to be ready (its etcd member healthy)", func() (bool, error) {
		st, err := nodeapi.ReadStatus(statusPath)
		return err == nil && st.Ready, nil
	})
	return p, err
}

func (p *Provider) newClusterInfo(s providers.Settings, addresses string) (ClusterInfo, error) {
	ci := ClusterInfo{Name: s.Cluster, Subnet: DefaultSubnet(s.Cluster), Addresses: addresses}
	if v := p.opts[OptSubnet]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 254 {
			return ClusterInfo{}, errkind.Errorf(errkind.InvalidArgument, "--subnet: %q must be a number 1-254 (N of %s)", v, strings.Replace(ci.Prefix().String(), "."+strconv.Itoa(ci.Subnet)+".", ".N.", 1))
		}
		ci.Subnet = n
	}
	// Another local cluster in this state dir must not use the subnet.
	ents, _ := os.ReadDir(s.StateDir)
	for _, e := range ents {
		if e.Name() == s.Cluster {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.StateDir, e.Name(), "cluster.json"))
		if err != nil {
			continue
		}
		var other ClusterInfo
		if json.Unmarshal(b, &other) == nil && other.Subnet == ci.Subnet {
			return ClusterInfo{}, errkind.Errorf(errkind.InvalidArgument, "--subnet: N=%d is used by local cluster %s; pass --subnet with another number 1-254", ci.Subnet, other.Name)
		}
	}
	ci.StaticIP = ci.Address(1).String()
	ci.Created = time.Now().UTC()
	if ci.Benchmark() {
		// Another cluster (another state dir) or the operator may hold
		// the /24 on lo already.
		if have, ok, err := loAddressIn(ci.Prefix()); err != nil {
			return ClusterInfo{}, fmt.Errorf("read lo's addresses: %w", err)
		} else if ok {
			return ClusterInfo{}, errkind.Errorf(errkind.InvalidArgument, "--subnet: %s is in use here (lo has %s: another local cluster, or left by one; 'ip addr del %s dev lo' if it is stale); pass --subnet with another number 1-254", ci.Prefix(), have, have)
		}
		return ci, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ci.StaticIP, "0"))
	if err != nil {
		return ClusterInfo{}, errkind.Errorf(errkind.FailedPrecondition, "cannot bind %s: %v%s", ci.StaticIP, err, hint(ci.StaticIP))
	}
	ln.Close()
	return ci, nil
}

// Down stops every process of the cluster (LB and replicas, found from
// their pid files) and removes its state dir. Idempotent.
func Down(ctx context.Context, s providers.Settings) error {
	p, err := open(s)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p.l.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := p.lbProc().stop(ctx, 10*time.Second); err != nil {
		return fmt.Errorf("stop load balancer: %w", err)
	}
	ents, _ := os.ReadDir(p.l.replicas())
	var wg sync.WaitGroup
	errs := make([]error, len(ents))
	for i, e := range ents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.inst.proc(e.Name()).stop(ctx, 10*time.Second); err != nil {
				errs[i] = fmt.Errorf("stop replica %s: %w", e.Name(), err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// The address on lo before the record that names it.
	if p.info, err = readClusterInfo(p.l, s.Cluster); err == nil {
		if err := p.removeNetwork(); err != nil {
			return err
		}
	}
	return os.RemoveAll(p.l.dir)
}
