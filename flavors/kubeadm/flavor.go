package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/ctxutil"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Name is the flavor's registry name (--flavor kubeadm).
const Name = flavors.Kubeadm

// A kubeadm master's files (cmd/kubeadm/app/constants: KubernetesDir,
// CACertAndKeyBaseName, EtcdCACertAndKeyBaseName,
// APIServerEtcdClientCertAndKeyBaseName; ManifestsSubDirName).
const (
	CACert             = "/etc/kubernetes/pki/ca.crt"
	EtcdCACert         = "/etc/kubernetes/pki/etcd/ca.crt"
	EtcdClientCert     = "/etc/kubernetes/pki/apiserver-etcd-client.crt"
	EtcdClientKey      = "/etc/kubernetes/pki/apiserver-etcd-client.key"
	APIServerManifest  = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	EtcdClientPort     = 2379 // kubeadm's etcd: --listen-client-urls https://127.0.0.1:2379,https://<advertise>:2379
	EtcdPeerPort       = 2380
	DefaultBindPort    = 6443 // InitConfiguration localAPIEndpoint.bindPort's default
	etcdLoopbackClient = "127.0.0.1:2379"
)

// Machine is what the flavor needs of the provider: a way into each
// master that runs commands (kubeadm, reading its files) and opens
// tunnels (etcd on the master's own loopback), as an operator's SSH
// does.
type Machine interface {
	providers.MachineDialer
	providers.MachineRunner
}

// machine is a Machine made of the provider's two capabilities
// (providers.OwnCapabilitiesOf).
type machine struct {
	providers.MachineDialer
	providers.MachineRunner
}

// Flavor is the kubeadm flavor bound to one cluster's provider.
//
// Built so far: what every flavor answers (etcd naming and access over
// the provider's way in, the masters' CA, the apiserver port, the version
// check), join and leave (flavors.Joiner), and the in-place upgrade
// (flavors.Upgrader: upgrade.go), which rolling-upgrade runs for this
// flavor in place of recreating a master from a template, and the
// conversion to HA (flavors.EndpointMover: convert.go).
type Flavor struct {
	p providers.Provider
	// format writes and reads the masters' templates on a provider that
	// carries them as documents (providers.Formatted), nil on one that
	// does not: registry.Open hands it to the provider (Format).
	format providers.Format
	m      Machine
	// upl is the provider's own upload to a machine, nil when it has
	// none (upload then carries a file through RunOnMachine).
	upl providers.MachineUploader
	// wl lists the provider's workers, nil when it knows none.
	wl  providers.WorkerLister
	log *slog.Logger
	up  UpgradeOptions
	// nodeBinary is hamaster-node's path for a snapshot restore ("":
	// next to hamaster, then $PATH).
	nodeBinary string

	// etcd keeps the etcd client certificate once read (etcdTLS),
	// shared by the copies WithAPIServerArgs makes.
	etcd *etcdTLSCache
}

// etcdTLSCache is the etcd client certificate and CA once read.
type etcdTLSCache struct {
	mu  sync.Mutex
	cfg *tls.Config
}

var (
	_ flavors.Flavor      = (*Flavor)(nil)
	_ flavors.Joiner      = (*Flavor)(nil)
	_ flavors.NodeDrainer = (*Flavor)(nil)
)

// New binds the flavor to p, whose machines it reaches through p's way in.
func New(p providers.Provider, log *slog.Logger) (*Flavor, error) {
	c := providers.OwnCapabilitiesOf(p)
	if c.MachineDialer == nil || c.MachineRunner == nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %s: the %s provider has no way to run kubeadm on its masters (SSH)", Name, p.Name())
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := machine{MachineDialer: c.MachineDialer, MachineRunner: c.MachineRunner}
	f := &Flavor{p: p, m: m, upl: c.MachineUploader, wl: c.WorkerLister, log: log, etcd: &etcdTLSCache{}}
	if fp := c.Formatted; fp != nil {
		// GCE: the machine's metadata is all the machine's (MachineFormat).
		if carrier := fp.Carrier(); carrier != providers.CarrierMetadata {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %s: the %s provider carries templates as %q; kubeadm masters are proven on metadata-carrying machines (GCE) and the metal provider's hosts only", Name, p.Name(), carrier)
		}
		f.format = MachineFormat{}
	}
	return f, nil
}

// Name implements flavors.Flavor.
func (*Flavor) Name() string { return Name }

// Format implements flavors.Flavor.
func (f *Flavor) Format() providers.Format { return f.format }

// EtcdClusters implements flavors.Flavor: kubeadm's stacked etcd, one
// cluster.
func (*Flavor) EtcdClusters() []string { return []string{flavors.EtcdMain} }

// EtcdMember implements flavors.Flavor: kubeadm names a master's member
// after its Node and gives it https://<advertise address>:2380
// (cmd/kubeadm/app/phases/etcd/local.go GetEtcdPodSpec: --name,
// --initial-advertise-peer-urls).
func (f *Flavor) EtcdMember(_, replica, address string) (string, string) {
	name := f.m.MachineHostname(replica, address)
	if address == "" {
		return name, ""
	}
	return name, "https://" + net.JoinHostPort(address, strconv.Itoa(EtcdPeerPort))
}

// read returns the files at paths on machine, each in full, in one
// session (each session on a real host starts with the login's shell
// setup, a second or more): a line of base64 each.
func (f *Flavor) read(ctx context.Context, machine string, paths ...string) ([][]byte, error) {
	var script strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&script, "base64 -w0 < %s || exit 1; echo\n", remote.ShellQuote(p))
	}
	what := strings.Join(paths, ", ")
	b, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), machine, script.String())
	if err != nil {
		return nil, fmt.Errorf("master %s: read %s: %w", machine, what, err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(paths) {
		return nil, fmt.Errorf("master %s: read %s: %d files in the answer, want %d", machine, what, len(lines), len(paths))
	}
	out := make([][]byte, len(paths))
	for i, l := range lines {
		if out[i], err = base64.StdEncoding.DecodeString(l); err != nil {
			return nil, fmt.Errorf("master %s: read %s: %w", machine, paths[i], err)
		}
	}
	return out, nil
}

// etcdTLSTimeout bounds the read of the etcd client certificate and CA:
// set-up an attempt needs but does not own (a probe attempt's deadline
// may be seconds, and each session on a real host takes a second or more
// to start). Once read, it is kept until a client made with it fails.
const etcdTLSTimeout = 2 * time.Minute

// etcdTLS is the apiserver's etcd client certificate with the etcd CA,
// read from the first of cands that answers, or kept from before.
func (f *Flavor) etcdTLS(ctx context.Context, cands []providers.Replica) (*tls.Config, error) {
	c := f.etcd
	if c == nil {
		c = &etcdTLSCache{} // not kept
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg != nil {
		return c.cfg, nil
	}
	rctx, cancel := ctxutil.WithoutDeadline(ctx, etcdTLSTimeout)
	defer cancel()
	if err := throughFirst(cands, func(master string) error {
		files, err := f.read(rctx, master, EtcdCACert, EtcdClientCert, EtcdClientKey)
		if err != nil {
			return err
		}
		pair, err := tls.X509KeyPair(files[1], files[2])
		if err != nil {
			return fmt.Errorf("master %s: %s: %w", master, EtcdClientCert, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(files[0]) {
			return fmt.Errorf("master %s: %s is not PEM", master, EtcdCACert)
		}
		c.cfg = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
		return nil
	}); err != nil {
		return nil, errkind.Errorf(errkind.Unavailable, "no master's etcd client certificate readable: %w", err)
	}
	return c.cfg, nil
}

// forgetEtcdTLS drops the kept etcd client certificate (a client made
// with it failed: it may have been renewed since).
func (f *Flavor) forgetEtcdTLS() {
	if f.etcd == nil {
		return
	}
	f.etcd.mu.Lock()
	f.etcd.cfg = nil
	f.etcd.mu.Unlock()
}

// running lists the running masters not in exclude.
func (f *Flavor) running(ctx context.Context, exclude ...string) ([]providers.Replica, error) {
	_, rs, err := flavors.RunningMasters(ctx, f.p, exclude...)
	return rs, err
}

// firstRunning is the first running master not excluded, or
// FailedPrecondition "no running master to <what>" when there is none.
func (f *Flavor) firstRunning(ctx context.Context, what string, exclude ...string) (string, error) {
	rs, err := f.running(ctx, exclude...)
	if err != nil {
		return "", err
	}
	if len(rs) == 0 {
		return "", noneRunning(what)
	}
	return rs[0].Name, nil
}

// noneRunning is the refusal for want of a running master to do what.
func noneRunning(what string) error {
	return errkind.Errorf(errkind.FailedPrecondition, "no running master to %s", what)
}

// throughFirst calls read with each of rs in turn until one succeeds:
// nil then, or every master's error when none does (an error too when
// rs is empty).
func throughFirst(rs []providers.Replica, read func(master string) error) error {
	if len(rs) == 0 {
		return errors.New("no master to read through")
	}
	var errs []error
	for _, r := range rs {
		err := read(r.Name)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// EtcdCluster implements flavors.Flavor: through every running master
// not excluded, each member reached at its master's own loopback (its
// --listen-client-urls), with the apiserver's etcd client certificate
// and the etcd CA read from the first master that answers, as the
// apiserver itself connects.
func (f *Flavor) EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error) {
	if cluster != flavors.EtcdMain {
		return nil, errkind.Errorf(errkind.InvalidArgument, "kubeadm's masters run one etcd cluster (%s), not %q", flavors.EtcdMain, cluster)
	}
	all, cands, err := flavors.RunningMasters(ctx, f.p, exclude...)
	if err != nil {
		return nil, err
	}
	if len(cands) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "no running master to reach etcd through (excluding %v)", exclude)
	}
	tlsCfg, err := f.etcdTLS(ctx, cands)
	if err != nil {
		return nil, err
	}
	// Every running master's member is reachable by its Node name (an
	// excluded one too: a leadership transfer is asked of the leader,
	// and a member's health of the member), but the client's endpoints,
	// through which every other request goes, are the masters not
	// excluded.
	byHost := map[string]string{}
	var eps []string
	for _, r := range all {
		host := f.m.MachineHostname(r.Name, r.Address)
		if host == "" {
			continue
		}
		byHost[host] = r.Name
		if slices.Contains(exclude, r.Name) {
			continue
		}
		// The member's serving certificate names its Node and its
		// addresses (GetEtcdAltNames): the Node name is verified.
		eps = append(eps, "https://"+net.JoinHostPort(host, strconv.Itoa(EtcdClientPort)))
	}
	cfg := etcdmember.Config{TLS: tlsCfg, Endpoints: eps, Logger: f.log,
		// A member advertises https://<address>:2379; reach it through
		// its master's way in, by its Node name.
		ClientURLs: func(m etcdmember.Member) []string {
			if _, ok := byHost[m.Name]; !ok || m.Name == "" {
				return m.ClientURLs
			}
			return []string{"https://" + net.JoinHostPort(m.Name, strconv.Itoa(EtcdClientPort))}
		},
		DialContext: flavors.DialMemberVia(f.m, byHost, "name", func(string) string { return etcdLoopbackClient })}
	cli, err := etcdmember.New(ctx, cfg)
	if err != nil {
		f.forgetEtcdTLS()
		return nil, errkind.Errorf(errkind.Unavailable, "no master's etcd reachable through the %s provider: %w", f.p.Name(), err)
	}
	return cli, nil
}

// CloneTemplate implements flavors.Flavor: a kubeadm master is not
// cloned from a template; it joins (`kubeadm join --control-plane`), so
// the new machine gets only the source's machine settings and version.
func (*Flavor) CloneTemplate(_ context.Context, src providers.Template, _, _ string, _ map[string][]etcdmember.Member, _ map[string][]byte) (providers.Template, error) {
	t := src.Clone()
	t.Env, t.Files, t.ExtraArgs = map[string]string{}, map[string][]byte{}, nil
	return t, nil
}

// MasterCA implements flavors.Flavor: /etc/kubernetes/pki/ca.crt of a
// running master (kubeadm's CA under /etc/kubernetes/pki signs every
// master's certificates: the flavor is no flavors.ReplicaCertIssuer).
func (f *Flavor) MasterCA(ctx context.Context) ([]byte, error) {
	rs, err := f.running(ctx)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, errkind.Errorf(errkind.Unavailable, "the cluster CA (%s): no master is running", CACert)
	}
	var ca []byte
	if err := throughFirst(rs, func(master string) error {
		b, err := f.read(ctx, master, CACert)
		if err != nil {
			return err
		}
		ca = b[0]
		return nil
	}); err != nil {
		return nil, errkind.Errorf(errkind.Unavailable, "the cluster CA (%s) is readable on no running master: %w", CACert, err)
	}
	return ca, nil
}

// APIServerPort implements flavors.Flavor: kubeadm's default bind port.
func (*Flavor) APIServerPort() int { return DefaultBindPort }

// APIServerName implements flavors.Flavor: "kubernetes", which every
// apiserver certificate kubeadm issues names
// (cmd/kubeadm/app/util/pkiutil GetAPIServerAltNames: the node name,
// kubernetes, kubernetes.default, ..., the advertise address, the
// controlPlaneEndpoint and certSANs). Not the address dialed: a cloud
// reaches a master at an external address its certificate does not name
// (a GCE VM's ephemeral access config), while the advertise address is
// the internal one.
func (*Flavor) APIServerName() string { return "kubernetes" }

// CheckVersion implements flavors.Flavor: kubeadm upgrades one minor
// version at a time and never down a minor (kubeadm's version skew
// policy: cmd/kubeadm/app/phases/upgrade/policy.go EnforceVersionPolicies),
// checked against every running master's kube-apiserver image.
func (f *Flavor) CheckVersion(ctx context.Context, v string) error {
	target, err := version.ParseSemantic(v)
	if err != nil || !strings.HasPrefix(v, "v") {
		return errkind.Errorf(errkind.InvalidArgument, "--version %q: want a Kubernetes release such as v1.34.4", v)
	}
	rs, err := f.running(ctx)
	if err != nil {
		return err
	}
	// Every master at once: on a real host each read is a session whose
	// login can take a second.
	curs := make([]string, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { curs[i], errs[i] = f.RunningVersion(ctx, r.Name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, r := range rs {
		cur := curs[i]
		c, err := version.ParseSemantic(cur)
		if err != nil {
			return fmt.Errorf("master %s runs %q: %w", r.Name, cur, err)
		}
		switch {
		case target.Major() != c.Major() || target.Minor() > c.Minor()+1:
			return errkind.Errorf(errkind.InvalidArgument, "--version %s: master %s runs %s; kubeadm upgrades one minor version at a time", v, r.Name, cur)
		case target.Minor() < c.Minor():
			return errkind.Errorf(errkind.InvalidArgument, "--version %s: master %s runs %s; kubeadm does not downgrade a minor version", v, r.Name, cur)
		}
	}
	return nil
}

// RunningVersion is the version of machine's kube-apiserver static pod
// (its image's tag), "" when it has none.
func (f *Flavor) RunningVersion(ctx context.Context, machine string) (string, error) {
	b, err := f.read(ctx, machine, APIServerManifest)
	if err != nil {
		return "", err
	}
	return ManifestVersion(b[0])
}

// ManifestVersion is the tag of a static pod manifest's first
// container's image (registry.k8s.io/kube-apiserver:v1.33.13 → v1.33.13;
// a digest after the tag is ignored).
func ManifestVersion(manifest []byte) (string, error) {
	for _, line := range strings.Split(string(manifest), "\n") {
		img, ok := strings.CutPrefix(strings.TrimPrefix(strings.TrimSpace(line), "- "), "image:")
		if !ok {
			continue
		}
		img = strings.Trim(strings.TrimSpace(img), `"'`)
		img, _, _ = strings.Cut(img, "@")
		i := strings.LastIndex(img, ":")
		if i < 0 || i < strings.LastIndex(img, "/") || i == len(img)-1 {
			return "", fmt.Errorf("image %q has no tag", img)
		}
		return img[i+1:], nil
	}
	return "", fmt.Errorf("no container image in the manifest")
}
