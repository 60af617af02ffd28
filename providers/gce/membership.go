package gce

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

var _ providers.Membership = (*Provider)(nil)

// kubeUpKeyRE matches kube-master-certs keys (shell variable names in
// capitals: CA_KEY, ETCD_APISERVER_CLIENT_CERT); hamaster's own file names
// (ca.crt) never match.
var kubeUpKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// Template.Files holds the kube-master-certs item: each kube-up key with
// its value base64-decoded (so gzip bytes for ETCD_APISERVER_* certificates),
// and hamaster's own files under their names (kubeenv.FileKey in the
// item). templateFiles reads the item; certsItem writes it back unchanged.
func templateFiles(item string) (map[string][]byte, error) {
	all, err := kubeenv.ParseCerts(item)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(all))
	for k, v := range all {
		if n, ok := kubeenv.FileName(k); ok {
			k = n
		}
		out[k] = v
	}
	return out, nil
}

func certsItem(files map[string][]byte) string {
	m := make(map[string][]byte, len(files))
	for k, v := range files {
		if !kubeUpKeyRE.MatchString(k) {
			k = kubeenv.FileKey(k)
		}
		m[k] = v
	}
	return kubeenv.RenderCerts(m)
}

// CloneTemplate implements providers.Membership as
// cluster/gce/gci/master-helper.sh replicate-master-instance does
// (kubeenv.Replicate): kube-env and kube-master-certs copied verbatim but
// INITIAL_ETCD_CLUSTER (the current members' hostnames plus the new
// one), INITIAL_ETCD_CLUSTER_STATE=existing, and the new master's own
// etcd peer, etcd serving and apiserver etcd-client certificates, signed
// by the CAs in the metadata. The certificates hamaster issued are not
// used: a kube-up master's apiserver certificate (MASTER_CERT) already
// covers the static IP, which becomes the LB's.
//
// Unlike kube-up, which lists the masters' VMs (get-all-replica-names),
// the hostnames come from the main cluster's members: etcd refuses a
// joining member whose --initial-cluster differs from its membership.
func (p *Provider) CloneTemplate(_ context.Context, src providers.Template, replica, _ string, members map[string][]etcdmember.Member, _ map[string][]byte) (providers.Template, error) {
	m, err := kubeUpMaster(src)
	if err != nil {
		return providers.Template{}, err
	}
	var hosts []string
	for _, mem := range members[providers.EtcdMain] {
		if mem.Name == "" {
			continue // a learner not started yet: the new master, added by Replicate
		}
		h := kubeenv.HostOfMember(mem.Name)
		if h == "" {
			return providers.Template{}, errkind.Errorf(errkind.FailedPrecondition, "etcd member %s (%s) is not named etcd-<hostname>: the masters were not built by kube-up", mem.Name, strings.Join(mem.PeerURLs, ","))
		}
		hosts = append(hosts, h)
	}
	out, err := kubeenv.Replicate(m, hosts, replica)
	if err != nil {
		return providers.Template{}, fmt.Errorf("replicate master metadata for %s: %w", replica, err)
	}
	t := src.Clone()
	t.Env = out.Env
	t.Files = maps.Clone(t.Files)
	for k, v := range out.Certs {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return providers.Template{}, fmt.Errorf("%s %s: %w", kubeenv.KeyCerts, k, err)
		}
		t.Files[k] = b
	}
	return t, nil
}

// ClusterCA implements providers.MasterCertificates: kube-env's CA_CERT
// (base64 PEM; util.sh build-linux-kube-env), the CA of every master's
// apiserver certificate (MASTER_CERT).
func (p *Provider) ClusterCA(ctx context.Context) ([]byte, error) {
	rs, err := p.inst.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if v := r.Template.Env[kubeenv.CACert]; v != "" {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("master %s: kube-env %s is not base64: %w", r.Name, kubeenv.CACert, err)
			}
			return b, nil
		}
	}
	return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no master (named %s or %s-<3 characters>) has %s in its kube-env", p.cluster, p.masterName(), p.masterName(), kubeenv.CACert)
}
