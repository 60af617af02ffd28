package aws

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// KubeUpProvider is the AWS provider on masters in kube-up's AWS format
// (kubeup.go): New returns it when the cluster's masters' user data is
// that format. It follows kube-up's etcd conventions through the shared
// kubeenv package, as the gce provider does on kube-up's GCE masters:
//   - a master's hostname is EC2's: ip-a-b-c-d (the short private DNS
//     name, which resolves inside the VPC), so etcd members are named
//     etcd-ip-a-b-c-d with peer URL https://ip-a-b-c-d:2380 (events: the
//     same name, 2381);
//   - a new master's kube_env.yaml is kubeenv.Replicate's (kube-up's
//     replicate-master-instance: INITIAL_ETCD_CLUSTER + the new host,
//     INITIAL_ETCD_CLUSTER_STATE=existing, its own etcd peer and
//     etcd-apiserver certificates), the script around it verbatim;
//   - the masters carry their certificates (providers.MasterCertificates):
//     hamaster issues none and trusts the CA_CERT of their kube-env;
//   - etcd listens on each master's 127.0.0.1 (2379 with the apiserver's
//     etcd client certificate when ETCD_APISERVER_* are set, 4002 plain):
//     it is reached only through SSH (--ssh-user), each member through
//     its own master.
type KubeUpProvider struct {
	*Provider
}

var (
	_ providers.Membership         = (*KubeUpProvider)(nil)
	_ providers.MasterCertificates = (*KubeUpProvider)(nil)
	_ providers.APIServerNamer     = (*KubeUpProvider)(nil)
)

// KubeUpAPIServerPort is the apiserver's port on kube-up's masters (the
// AWS ones served https://${KUBE_MASTER_IP} on 443, as the GCE ones do:
// configure-kubeapiserver.sh --secure-port=443): the NLB listens and
// checks health there.
const KubeUpAPIServerPort = 443

// Hostname is the hostname EC2 gives an instance with this private IP
// (its private DNS name's first label).
func Hostname(privateIP string) string {
	return "ip-" + strings.ReplaceAll(privateIP, ".", "-")
}

func kubeUpCluster(name string) (kubeenv.EtcdCluster, error) {
	switch name {
	case providers.EtcdMain:
		return kubeenv.EtcdMain, nil
	case providers.EtcdEvents:
		return kubeenv.EtcdEvents, nil
	}
	return kubeenv.EtcdCluster{}, errkind.Errorf(errkind.InvalidArgument, "etcd cluster %q: kube-up masters run %q and %q", name, providers.EtcdMain, providers.EtcdEvents)
}

// EtcdClusters implements providers.Membership: main and events.
func (k *KubeUpProvider) EtcdClusters() []string {
	return []string{providers.EtcdMain, providers.EtcdEvents}
}

// EtcdMember implements providers.Membership.
func (k *KubeUpProvider) EtcdMember(cluster, replica, address string) (string, string) {
	c, err := kubeUpCluster(cluster)
	if err != nil {
		c = kubeenv.EtcdMain
	}
	ip := k.amap.toCloud(address)
	if address == "" {
		// Named by the replica alone: its instance's private address, as
		// last described.
		v, ok := k.privIPs.Load(replica)
		if !ok {
			return "", ""
		}
		ip = v.(string)
	}
	host := Hostname(ip)
	// etcd.manifest: --name etcd-{{ hostname }} in both clusters (the
	// events member is not named -events; its peer port tells it apart).
	return kubeenv.MemberName(host), kubeenv.PeerURL(c, host)
}

// APIServerName implements providers.APIServerNamer: kube-up's
// MASTER_CERT names kubernetes (and the Elastic IP and master 0's internal
// address: util.sh create-certs), not each master's own address, and a
// clone keeps it.
func (k *KubeUpProvider) APIServerName() string { return "kubernetes" }

// ClusterCA implements providers.MasterCertificates: CA_CERT of a running
// master's kube-env.
func (k *KubeUpProvider) ClusterCA(ctx context.Context) ([]byte, error) {
	env, err := k.masterEnv(ctx)
	if err != nil {
		return nil, err
	}
	v, ok := env[kubeenv.CACert]
	if !ok {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: the masters' kube_env.yaml has no %s", k.cluster, kubeenv.CACert)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: kube_env.yaml %s is not base64: %v", k.cluster, kubeenv.CACert, err)
	}
	return b, nil
}

// masterEnv is a running master's kube_env.yaml.
func (k *KubeUpProvider) masterEnv(ctx context.Context) (map[string]string, error) {
	rs, err := k.inst.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Running() && r.Template.Machine[MachineKubeUpScript] != "" {
			return r.Template.Env, nil
		}
	}
	return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no running master in kube-up's AWS format", k.cluster)
}

// CloneTemplate implements providers.Membership with kubeenv.Replicate.
// The member list gives the hostnames of the masters already in the
// cluster (a learner not started yet has no name: the new one).
func (k *KubeUpProvider) CloneTemplate(_ context.Context, src providers.Template, replica, address string, members map[string][]etcdmember.Member, _ map[string][]byte) (providers.Template, error) {
	if src.Machine[MachineKubeUpScript] == "" {
		return providers.Template{}, errkind.Errorf(errkind.FailedPrecondition, "the source master's user data is not kube-up's AWS format")
	}
	host := Hostname(k.amap.toCloud(address))
	var existing []string
	for _, m := range members[providers.EtcdMain] {
		if h := kubeenv.HostOfMember(m.Name); h != "" && h != host {
			existing = append(existing, h)
		}
	}
	// kube-up's AWS kube-env holds what GCE keeps in kube-master-certs:
	// split it for Replicate and merge it back.
	m := kubeenv.Master{Env: map[string]string{}, Certs: map[string]string{}}
	for key, v := range src.Env {
		if strings.HasPrefix(key, "ETCD_APISERVER_") {
			m.Certs[key] = v
		} else {
			m.Env[key] = v
		}
	}
	out, err := kubeenv.Replicate(m, existing, host)
	if err != nil {
		return providers.Template{}, fmt.Errorf("replicate master for %s (%s): %w", replica, host, err)
	}
	t := src.Clone()
	t.Env = out.Env
	maps.Copy(t.Env, out.Certs)
	t.Files = map[string][]byte{}
	return t, nil
}

// EtcdCluster implements providers.Membership: through SSH to a master,
// to its 127.0.0.1; every member is reached through its own master (its
// hostname names it).
func (k *KubeUpProvider) EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error) {
	c, err := kubeUpCluster(cluster)
	if err != nil {
		return nil, err
	}
	if !k.sshEnabled() {
		return nil, errkind.Errorf(errkind.InvalidArgument, "kube-up masters serve etcd on their own 127.0.0.1 only: give --%s (and --%s or --%s) so hamaster can tunnel to it", OptSSHUser, OptSSHKey, OptSSHBastion)
	}
	is, err := k.inst.describe(ctx, "")
	if err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, e := range exclude {
		skip[e] = true
	}
	byHost := map[string]instance{}
	var cands []instance
	for _, i := range is {
		if i.state != providers.StateRunning || i.privateIP == "" {
			continue
		}
		byHost[Hostname(i.privateIP)] = i
		if !skip[i.name] {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no running master to reach etcd through (excluding %v)", k.cluster, exclude)
	}
	scheme, tlsCfg := "http", (*tls.Config)(nil)
	if c == kubeenv.EtcdMain {
		if tlsCfg, err = k.etcdClientTLS(ctx); err != nil {
			return nil, err
		}
		if tlsCfg != nil {
			scheme = "https"
		}
	}
	port := strconv.Itoa(c.ClientPort)
	var errs []error
	for _, first := range cands {
		addr, viaBastion, err := k.sshAddress(first)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Connect first: a master that does not take SSH is skipped here.
		_, err = k.sshDial(ctx, addr, viaBastion)
		if err != nil {
			errs = append(errs, fmt.Errorf("ssh %s (%s): %w", first.name, addr, err))
			continue
		}
		cfg := etcdmember.Config{
			Endpoints: []string{scheme + "://" + net.JoinHostPort("127.0.0.1", port)},
			TLS:       tlsCfg,
			Logger:    k.log,
			// Members advertise 127.0.0.1: name each by its host…
			ClientURLs: func(m etcdmember.Member) []string {
				if h := kubeenv.HostOfMember(strings.TrimSuffix(m.Name, c.Suffix)); h != "" {
					return []string{scheme + "://" + net.JoinHostPort(h, port)}
				}
				return m.ClientURLs
			},
			// …and dial that host's 127.0.0.1 through its own sshd.
			DialContext: func(ctx context.Context, a string) (net.Conn, error) {
				h, p, err := net.SplitHostPort(a)
				if err != nil {
					return nil, err
				}
				if h == "127.0.0.1" || h == "localhost" {
					return k.sshDialThrough(ctx, addr, viaBastion, "tcp", a)
				}
				i, ok := byHost[h]
				if !ok {
					return nil, errkind.Errorf(errkind.NotFound, "etcd member on %s: no running master has that hostname", h)
				}
				ma, via, err := k.sshAddress(i)
				if err != nil {
					return nil, err
				}
				return k.sshDialThrough(ctx, ma, via, "tcp", net.JoinHostPort("127.0.0.1", p))
			},
		}
		cli, err := etcdmember.New(ctx, cfg)
		if err != nil {
			k.sshDrop(addr)
			errs = append(errs, fmt.Errorf("etcd %s through ssh %s: %w", cluster, first.name, err))
			continue
		}
		return cli, nil
	}
	return nil, errkind.Errorf(errkind.Unavailable, "cluster %s: no master reachable over SSH for etcd %s: %v", k.cluster, cluster, errs)
}

// Etcd implements providers.Provider on kube-up masters: the main cluster.
func (k *KubeUpProvider) Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error) {
	return k.EtcdCluster(ctx, providers.EtcdMain, exclude...)
}

// etcdClientTLS is the apiserver's etcd client material from the masters'
// kube-env (configure-helper.sh create-master-etcd-apiserver-auth), nil
// when main etcd serves plain http.
func (k *KubeUpProvider) etcdClientTLS(ctx context.Context) (*tls.Config, error) {
	env, err := k.masterEnv(ctx)
	if err != nil {
		return nil, err
	}
	if env[kubeenv.EtcdAPIServerClientCert] == "" {
		return nil, nil
	}
	dec := func(key string) ([]byte, error) {
		b, err := kubeenv.DecodeGzipBase64(key, env[key])
		if err != nil {
			return nil, errkind.Errorf(errkind.FailedPrecondition, "kube_env.yaml: %v", err)
		}
		return b, nil
	}
	caPEM, err := dec(kubeenv.EtcdAPIServerCACert)
	if err != nil {
		return nil, err
	}
	crt, err := dec(kubeenv.EtcdAPIServerClientCert)
	if err != nil {
		return nil, err
	}
	key, err := dec(kubeenv.EtcdAPIServerClientKey)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "kube_env.yaml %s/%s: %v", kubeenv.EtcdAPIServerClientCert, kubeenv.EtcdAPIServerClientKey, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "kube_env.yaml %s is not a PEM certificate", kubeenv.EtcdAPIServerCACert)
	}
	// The serving certificate names the master's hostname and 127.0.0.1;
	// through the tunnel the client dials 127.0.0.1.
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, nil
}

// detectKubeUp reports whether the cluster's running masters carry
// kube-up's AWS user data.
func (p *Provider) detectKubeUp(ctx context.Context) (bool, error) {
	is, err := p.inst.describe(ctx, "")
	if err != nil {
		return false, err
	}
	for _, i := range is {
		if i.state != providers.StateRunning {
			continue
		}
		ud, err := p.inst.userData(ctx, i)
		if err != nil {
			return false, err
		}
		_, err = ParseKubeUpUserData(ud)
		return err == nil, nil
	}
	return false, nil
}
