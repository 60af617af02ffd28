// Package kubeup is the flavor of masters built by kube-up.sh, on GCE
// (cluster/gce/util.sh create-master, master-helper.sh
// replicate-master-instance) and on AWS (cluster/aws/util.sh
// start-master), written once for both. A kube-up master:
//   - runs two etcd clusters, main (client 2379, peer 2380) and events
//     (4002, 2381), whose members are named etcd-<hostname> with peer URLs
//     https://<hostname>:<peer port> (configure-helper.sh
//     start-etcd-servers, etcd.manifest --name etcd-{{ hostname }}); the
//     hostname is the provider's (a GCE instance's name, EC2's
//     ip-a-b-c-d: providers.MachineDialer.MachineHostname);
//   - serves etcd on its own 127.0.0.1 only (prepare-etcd-manifest
//     --listen-client-urls), so hamaster reaches each member as kube-up
//     does (util.sh add-replica-to-etcd runs curl on the master itself):
//     through the provider's way in to that master
//     (providers.MachineDialer.DialMachine: SSH), main etcd with mutual
//     TLS from the master's ETCD_APISERVER_* material;
//   - carries the certificates kube-up made (kube-env and
//     kube-master-certs on GCE, the kube_env.yaml heredoc on AWS): hamaster
//     issues none and trusts kube-env's CA_CERT, and a new master's
//     template is kubeenv.Replicate's (replicate-master-instance:
//     INITIAL_ETCD_CLUSTER plus the new host, INITIAL_ETCD_CLUSTER_STATE=
//     existing, its own etcd peer, etcd serving and apiserver etcd-client
//     certificates);
//   - has an apiserver certificate (MASTER_CERT) that names "kubernetes",
//     the static IP and the service IP, not each master's own address
//     (util.sh create-certs).
//
// A template's Env is kube-env and Files holds kube-master-certs' keys
// (CA_KEY, ETCD_APISERVER_CLIENT_CERT…) base64-decoded; a master that
// keeps those in kube-env (kube-up's AWS masters) leaves Files without
// them, and a clone keeps each where it was. How a template is written on
// a machine is this flavor's too, given to the provider as its
// providers.Format: on GCE the kube-env and kube-master-certs metadata
// items (Metadata), on AWS kube-up's user-data script (UserData), a
// version in both as the release tarball the master boots.
package kubeup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// Flavor is kube-up's master format on one cluster's provider.
type Flavor struct {
	p    providers.Provider
	dial providers.MachineDialer
	log  *slog.Logger
	// rel is where new releases come from (the provider's release
	// directory); nil on a provider that keeps no template (a test's).
	rel *releases
	// format writes and reads the masters' templates on a provider that
	// carries them as documents (providers.Formatted), nil on one that
	// does not: registry.Open hands it to the provider (Format).
	format providers.Format
}

// Format implements flavors.Flavor.
func (f *Flavor) Format() providers.Format { return f.format }

var _ flavors.Flavor = (*Flavor)(nil)

// New binds the flavor to p, which must have a way into its machines
// (providers.MachineDialer); log (nil: discard) gets the etcd clients'
// lines. A provider keeping templates as documents
// (providers.Formatted) is given kube-up's GCE format (Metadata), taking
// new releases from its release directory (providers.ReleaseSource).
func New(p providers.Provider, log *slog.Logger) (*Flavor, error) {
	c := providers.OwnCapabilitiesOf(p)
	d := c.MachineDialer
	if d == nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %s: the %s provider has no way into its machines (SSH) to reach kube-up's etcd on their 127.0.0.1", flavors.KubeUp, p.Name())
	}
	f := &Flavor{p: p, dial: d, log: log}
	if fp := c.Formatted; fp != nil {
		base, option := "", "release-url"
		if rs := c.ReleaseSource; rs != nil {
			base, option = rs.ReleaseURL()
		}
		rel, err := newReleases(base, option)
		if err != nil {
			return nil, err
		}
		switch carrier := fp.Carrier(); carrier {
		case providers.CarrierMetadata:
			f.format = &Metadata{rel: rel}
		case providers.CarrierUserData:
			f.format = &UserData{rel: rel}
		default:
			return nil, fmt.Errorf("--flavor %s: the %s provider carries templates as %q, which kube-up's format has no form for", flavors.KubeUp, p.Name(), carrier)
		}
		f.rel = rel
	}
	return f, nil
}

// Name implements flavors.Flavor.
func (*Flavor) Name() string { return flavors.KubeUp }

// EtcdClusters implements flavors.Flavor: main and events.
func (*Flavor) EtcdClusters() []string { return []string{flavors.EtcdMain, flavors.EtcdEvents} }

// cluster is the kube-up etcd cluster named c.
func cluster(c string) (kubeenv.EtcdCluster, error) {
	switch c {
	case flavors.EtcdMain:
		return kubeenv.EtcdMain, nil
	case flavors.EtcdEvents:
		return kubeenv.EtcdEvents, nil
	}
	return kubeenv.EtcdCluster{}, errkind.Errorf(errkind.InvalidArgument, "etcd cluster %q: kube-up masters run %q and %q", c, flavors.EtcdMain, flavors.EtcdEvents)
}

// EtcdMember implements flavors.Flavor: etcd-<hostname> in both clusters
// (the events member is not named -events; its peer port tells it
// apart), "" when the provider cannot tell the hostname yet.
func (f *Flavor) EtcdMember(c, replica, address string) (string, string) {
	kc, err := cluster(c)
	if err != nil {
		kc = kubeenv.EtcdMain // EtcdClusters never names another
	}
	host := f.dial.MachineHostname(replica, address)
	if host == "" {
		return "", ""
	}
	return kubeenv.MemberName(host), kubeenv.PeerURL(kc, host)
}

// EtcdCluster implements flavors.Flavor. Every running master not
// excluded is an endpoint, named by its hostname: when the master a
// connection goes through is recreated (a rolling upgrade), the client
// fails over to another and the cluster lock's lease keeps being renewed.
// Every member advertises the same loopback client URL, so the client is
// told to reach member etcd-<host> at <host>:<port>, and the dialer opens
// that as 127.0.0.1:<port> on master <host> through the provider: each
// member's status comes from its own master.
func (f *Flavor) EtcdCluster(ctx context.Context, c string, exclude ...string) (*etcdmember.Client, error) {
	kc, err := cluster(c)
	if err != nil {
		return nil, err
	}
	all, cands, err := flavors.RunningMasters(ctx, f.p, exclude...)
	if err != nil {
		return nil, err
	}
	byHost := map[string]string{}
	for _, r := range all {
		if h := f.dial.MachineHostname(r.Name, r.Address); h != "" {
			byHost[h] = r.Name
		}
	}
	if len(cands) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "no running master to reach etcd %s through (excluding %v)", c, exclude)
	}
	scheme, tlsCfg, err := clientTLS(kc, cands[0])
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(kc.ClientPort)
	loopback := net.JoinHostPort("127.0.0.1", port)
	// One tunnel first: when no master takes the provider's way in, say
	// why (a missing --ssh-user among it) rather than time out.
	var errs []error
	for _, r := range cands {
		conn, err := f.dial.DialMachine(ctx, r.Name, loopback)
		if err != nil {
			errs = append(errs, fmt.Errorf("master %s: %w", r.Name, err))
			continue
		}
		_ = conn.Close()
		errs = nil
		break
	}
	if len(errs) > 0 {
		if errors.Is(errs[0], errkind.InvalidArgument) {
			return nil, errs[0] // a setting is missing (--ssh-user): say which
		}
		return nil, errkind.Errorf(errkind.Unavailable, "no master's etcd %s reachable through the %s provider: %w", c, f.p.Name(), errors.Join(errs...))
	}
	var eps []string
	for _, r := range cands {
		if host := f.dial.MachineHostname(r.Name, r.Address); host != "" {
			eps = append(eps, scheme+"://"+net.JoinHostPort(host, port))
		}
	}
	cfg := etcdmember.Config{TLS: tlsCfg, Endpoints: eps, Logger: f.log,
		ClientURLs: func(m etcdmember.Member) []string {
			host := kubeenv.HostOfMember(strings.TrimSuffix(m.Name, kc.Suffix))
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
		},
		DialContext: flavors.DialMemberVia(f.dial, byHost, "hostname", func(port string) string { return net.JoinHostPort("127.0.0.1", port) })}
	cli, err := etcdmember.New(ctx, cfg)
	if err != nil {
		return nil, errkind.Errorf(errkind.Unavailable, "no master's etcd %s reachable through the %s provider: %w", c, f.p.Name(), err)
	}
	return cli, nil
}

// clientTLS is how hamaster talks to cluster c's client port on a
// kube-up master: https with a client certificate when the master has
// ETCD_APISERVER_* material (the main cluster: create-etcd-apiserver-certs),
// plain http otherwise (events; main etcd without it). The certificate is
// hamaster's own, made in memory from ETCD_APISERVER_CA_* when the master
// carries the CA key, else the apiserver's client certificate
// (configure-helper.sh create-master-etcd-apiserver-auth).
func clientTLS(c kubeenv.EtcdCluster, r providers.Replica) (string, *tls.Config, error) {
	m := master(r.Template)
	if c.Suffix != "" || m.Certs[kubeenv.EtcdAPIServerClientCert] == "" {
		return "http", nil, nil
	}
	var pair tls.Certificate
	pool := x509.NewCertPool()
	if m.HasEtcdAPIServerTLS() {
		issuer, err := m.EtcdAPIServerCA()
		if err != nil {
			return "", nil, fmt.Errorf("master %s: %w", r.Name, err)
		}
		kp, err := issuer.IssueClient("hamaster", nil, certs.ECDSA)
		if err != nil {
			return "", nil, fmt.Errorf("issue hamaster's etcd client certificate from %s: %w", kubeenv.EtcdAPIServerCACert, err)
		}
		if pair, err = tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
			return "", nil, err
		}
		pool.AddCert(issuer.Cert)
	} else {
		dec := func(key string) ([]byte, error) {
			b, err := kubeenv.DecodeGzipBase64(key, m.Certs[key])
			if err != nil {
				return nil, errkind.Errorf(errkind.FailedPrecondition, "master %s: %v", r.Name, err)
			}
			return b, nil
		}
		caPEM, err := dec(kubeenv.EtcdAPIServerCACert)
		if err != nil {
			return "", nil, err
		}
		crt, err := dec(kubeenv.EtcdAPIServerClientCert)
		if err != nil {
			return "", nil, err
		}
		key, err := dec(kubeenv.EtcdAPIServerClientKey)
		if err != nil {
			return "", nil, err
		}
		if pair, err = tls.X509KeyPair(crt, key); err != nil {
			return "", nil, errkind.Errorf(errkind.FailedPrecondition, "master %s: %s/%s: %v", r.Name, kubeenv.EtcdAPIServerClientCert, kubeenv.EtcdAPIServerClientKey, err)
		}
		if !pool.AppendCertsFromPEM(caPEM) {
			return "", nil, errkind.Errorf(errkind.FailedPrecondition, "master %s: %s is not a PEM certificate", r.Name, kubeenv.EtcdAPIServerCACert)
		}
	}
	// Each master's etcd serving certificate covers 127.0.0.1, where the
	// tunnel ends (create-etcd-apiserver-certs), not the name it is dialed by.
	return "https", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, nil
}

// certKeyRE matches kube-master-certs keys (shell variable names in
// capitals: CA_KEY, ETCD_APISERVER_CLIENT_CERT); hamaster's own file
// names (ca.crt) never match.
var certKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// certsInEnv reports whether a template keeps kube-master-certs' etcd
// keys in kube-env (kube-up's AWS kube_env.yaml) rather than in Files.
func certsInEnv(t providers.Template) bool {
	for k := range t.Files {
		if certKeyRE.MatchString(k) {
			return false
		}
	}
	return true
}

// master is a template as kube-up's two metadata items.
func master(t providers.Template) kubeenv.Master {
	m := kubeenv.Master{Env: map[string]string{}, Certs: map[string]string{}}
	for k, v := range t.Env {
		if strings.HasPrefix(k, "ETCD_APISERVER_") {
			m.Certs[k] = v
		} else {
			m.Env[k] = v
		}
	}
	for k, v := range t.Files {
		if certKeyRE.MatchString(k) {
			m.Certs[k] = base64.StdEncoding.EncodeToString(v)
		}
	}
	return m
}

// CloneTemplate implements flavors.Flavor as replicate-master-instance
// does (kubeenv.Replicate): kube-env and kube-master-certs copied verbatim
// but INITIAL_ETCD_CLUSTER (the current members' hostnames plus the new
// one), INITIAL_ETCD_CLUSTER_STATE=existing, and the new master's own
// etcd peer, etcd serving and apiserver etcd-client certificates, signed
// by the CAs the master carries. The certificates hamaster issued are not
// used: MASTER_CERT already covers the static IP, which becomes the LB's.
//
// Unlike kube-up, which lists the masters' VMs (get-all-replica-names),
// the hostnames come from the main cluster's members: etcd refuses a
// joining member whose --initial-cluster differs from its membership.
func (f *Flavor) CloneTemplate(_ context.Context, src providers.Template, replica, address string, members map[string][]etcdmember.Member, _ map[string][]byte) (providers.Template, error) {
	m := master(src)
	if m.Env[kubeenv.EtcdCACert] == "" {
		return providers.Template{}, errkind.Errorf(errkind.FailedPrecondition, "its kube-env has no %s: not a master kube-up built (cluster/gce/util.sh create-master writes the etcd CA into kube-env)", kubeenv.EtcdCACert)
	}
	host := f.dial.MachineHostname(replica, address)
	if host == "" {
		return providers.Template{}, errkind.Errorf(errkind.FailedPrecondition, "new master %s: the %s provider cannot tell its hostname (no address yet)", replica, f.p.Name())
	}
	var hosts []string
	for _, mem := range members[flavors.EtcdMain] {
		if mem.Name == "" {
			continue // a learner not started yet: the new master, added by Replicate
		}
		h := kubeenv.HostOfMember(mem.Name)
		if h == "" {
			return providers.Template{}, errkind.Errorf(errkind.FailedPrecondition, "etcd member %s (%s) is not named etcd-<hostname>: the masters were not built by kube-up", mem.Name, strings.Join(mem.PeerURLs, ","))
		}
		hosts = append(hosts, h)
	}
	out, err := kubeenv.Replicate(m, hosts, host)
	if err != nil {
		return providers.Template{}, fmt.Errorf("replicate master metadata for %s (%s): %w", replica, host, err)
	}
	inEnv := certsInEnv(src)
	t := src.Clone()
	t.Env = out.Env
	t.Files = maps.Clone(t.Files)
	for k, v := range out.Certs {
		if inEnv {
			t.Env[k] = v
			continue
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return providers.Template{}, fmt.Errorf("%s %s: %w", kubeenv.KeyCerts, k, err)
		}
		t.Files[k] = b
	}
	return t, nil
}

// MasterCA implements flavors.Flavor: kube-env's CA_CERT (base64 PEM;
// util.sh build-linux-kube-env), the CA of every master's apiserver
// certificate (MASTER_CERT): kube-up made them, so the flavor is no
// flavors.ReplicaCertIssuer.
func (f *Flavor) MasterCA(ctx context.Context) ([]byte, error) {
	rs, err := f.p.Instances().List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if v := r.Template.Env[kubeenv.CACert]; v != "" {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
			if err != nil {
				return nil, errkind.Errorf(errkind.FailedPrecondition, "master %s: kube-env %s is not base64: %v", r.Name, kubeenv.CACert, err)
			}
			return b, nil
		}
	}
	return nil, errkind.Errorf(errkind.FailedPrecondition, "no master of the cluster has %s in its kube-env", kubeenv.CACert)
}

// APIServerPort implements flavors.Flavor: kube-up's masters serve 443
// (cluster/gce/gci/configure-kubeapiserver.sh start-kube-apiserver:
// --secure-port=443; util.sh create-loadbalancer forwards 443), on GCE
// and on AWS alike.
func (*Flavor) APIServerPort() int { return APIServerPort }

// APIServerPort is kube-up's apiserver port.
const APIServerPort = 443

// APIServerName implements flavors.Flavor: MASTER_CERT names kubernetes
// (util.sh create-certs: sans DNS:kubernetes,...), and a clone keeps it.
func (*Flavor) APIServerName() string { return "kubernetes" }

// CheckVersion implements flavors.Flavor: a kube-up master's version is
// its server tarball (SERVER_BINARY_TAR_URL, hash-checked at boot by
// configure.sh download-or-bust), published where the provider's release
// site says: when any master boots from a server tarball, version's
// release must be published there (its .sha512 files fetched). Masters
// without a tarball URL (KUBE_VERSION) need nothing.
func (f *Flavor) CheckVersion(ctx context.Context, version string) error {
	if f.rel == nil {
		return nil
	}
	reps, err := f.p.Instances().List(ctx)
	if err != nil {
		return err
	}
	envs := make([]map[string]string, 0, len(reps))
	for _, r := range reps {
		envs = append(envs, r.Template.Env)
	}
	return f.rel.check(ctx, version, envs)
}
