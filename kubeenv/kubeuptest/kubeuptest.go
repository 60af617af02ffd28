// Package kubeuptest builds the metadata of a kube-up GCE master 0 for
// tests: testdata/master-kube-env.yaml and testdata/kube-master-certs.yaml
// (every key cluster/gce/util.sh build-linux-kube-env and
// build-kube-master-certs write for a master) with their certificate
// placeholders filled by material made the way kube-up makes it:
//   - create-certs: the cluster CA, MASTER_CERT for the static IP, the
//     first service IP, kubernetes.* and MASTER_NAME; client certificates
//     for the kubelet, kubecfg and the apiserver (base64);
//   - create-etcd-certs: an etcd CA and master 0's peer certificate
//     (CN and SAN the hostname and 127.0.0.1; certificates gzip+base64,
//     keys base64);
//   - create-etcd-apiserver-certs: the etcd serving certificate and the
//     apiserver's etcd client certificate. kube-up generates them in the
//     same cfssl directory as the peer material, so on a fresh cluster the
//     two etcd CAs are one; SeparateEtcdAPIServerCA makes them differ.
//
// Nothing here is produced by the code under test.
package kubeuptest

import (
	"embed"
	"fmt"
	"net"
	"strings"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/kubeenv"
)

//go:embed testdata/*.yaml
var fixtures embed.FS

// Options describe the cluster kube-up made.
type Options struct {
	// InstancePrefix is kube-up's INSTANCE_PREFIX ("kubernetes");
	// MASTER_NAME is <prefix>-master.
	InstancePrefix string
	Project        string
	Zone           string
	// StaticIP is ${MASTER_NAME}-ip's address.
	StaticIP string
	// SeparateEtcdAPIServerCA signs ETCD_APISERVER_* with a CA of its own.
	SeparateEtcdAPIServerCA bool
	// DevelVersion is the version inside master 0's devel upload
	// (default DefaultDevelVersion): the server and manifests tarballs
	// kube-up's upload-tars put in the staging bucket, their sha512 in
	// SERVER_BINARY_TAR_HASH and KUBE_MANIFESTS_TAR_HASH.
	DevelVersion string
	// Hostname is master 0's hostname, which names its etcd member
	// (INITIAL_ETCD_CLUSTER) and its etcd certificates (default
	// MASTER_NAME, GCE's instance name; an AWS master's is EC2's
	// ip-a-b-c-d).
	Hostname string
}

// Master is master 0's metadata: the item texts exactly as
// create-master-instance stores them, and the CAs (for assertions).
type Master struct {
	Name          string
	KubeEnv       string // metadata item "kube-env"
	MasterCerts   string // metadata item "kube-master-certs"
	ClusterCA     *certs.CA
	EtcdPeerCA    *certs.CA
	EtcdClientCA  *certs.CA
	APIServerCert *certs.Pair
	// ServerTar and ManifestsTar are the devel upload's tarballs, to be
	// served at kube-env's SERVER_BINARY_TAR_URL and KUBE_MANIFESTS_TAR_URL.
	ServerTar, ManifestsTar []byte
}

// NewMaster fills the fixture.
func NewMaster(o Options) (*Master, error) {
	if o.InstancePrefix == "" {
		o.InstancePrefix = "kubernetes"
	}
	name := o.InstancePrefix + "-master"
	region := o.Zone[:max(strings.LastIndex(o.Zone, "-"), 0)]
	m := &Master{Name: name}
	host := o.Hostname
	if host == "" {
		host = name
	}
	vals := map[string]string{"HOSTNAME": host,
		"CLUSTER_NAME": o.InstancePrefix, "INSTANCE_PREFIX": o.InstancePrefix, "PROJECT": o.Project,
		"ZONE": o.Zone, "REGION": region, "STATIC_IP": o.StaticIP, "MASTER_NAME": name,
	}
	b64 := kubeenv.EncodeBase64
	gz := kubeenv.EncodeGzipBase64
	var err error
	newCA := func(cn string) *certs.CA {
		if err != nil {
			return nil
		}
		var c *certs.CA
		c, err = certs.NewCA(cn, certs.ECDSA, 0)
		return c
	}
	client := func(ca *certs.CA, cn, certKey, keyKey string, enc func([]byte) string) {
		if err != nil {
			return
		}
		var p *certs.Pair
		if p, err = ca.IssueClient(cn, nil, certs.ECDSA); err == nil {
			vals[certKey], vals[keyKey] = enc(p.CertPEM), b64(p.KeyPEM)
		}
	}
	caVals := func(ca *certs.CA, certKey, keyKey string, enc func([]byte) string) {
		if err != nil {
			return
		}
		var k []byte
		if k, err = ca.KeyPEM(); err == nil {
			if certKey != "" {
				vals[certKey] = enc(ca.CertPEM)
			}
			vals[keyKey] = b64(k)
		}
	}

	m.ClusterCA = newCA("kubernetes")
	caVals(m.ClusterCA, "CA_CERT", "CA_KEY", b64)
	if err == nil {
		m.APIServerCert, err = m.ClusterCA.IssueAPIServer(certs.APIServerSANs{StaticIP: o.StaticIP, ServiceCIDR: "10.0.0.0/16", ReplicaNames: []string{name}}, certs.ECDSA, 0)
		if err == nil {
			vals["MASTER_CERT"], vals["MASTER_KEY"] = b64(m.APIServerCert.CertPEM), b64(m.APIServerCert.KeyPEM)
		}
	}
	client(m.ClusterCA, "kubelet", "KUBELET_CERT", "KUBELET_KEY", b64)
	client(m.ClusterCA, "kubecfg", "KUBECFG_CERT", "KUBECFG_KEY", b64)
	client(m.ClusterCA, "kube-apiserver", "KUBEAPISERVER_CERT", "KUBEAPISERVER_KEY", b64)
	agg := newCA("aggregator")
	caVals(agg, "REQUESTHEADER_CA_CERT", "AGGREGATOR_CA_KEY", b64)
	client(agg, "aggregator", "PROXY_CLIENT_CERT", "PROXY_CLIENT_KEY", b64)
	for _, who := range []string{"SERVER", "AGENT"} {
		kc := newCA("konnectivity-" + strings.ToLower(who))
		caVals(kc, "KONNECTIVITY_"+who+"_CA_CERT", "KONNECTIVITY_"+who+"_CA_KEY", b64)
		client(kc, "konnectivity", "KONNECTIVITY_"+who+"_CERT", "KONNECTIVITY_"+who+"_KEY", b64)
		client(kc, "konnectivity-client", "KONNECTIVITY_"+who+"_CLIENT_CERT", "KONNECTIVITY_"+who+"_CLIENT_KEY", b64)
	}

	m.EtcdPeerCA = newCA("Kubernetes")
	caVals(m.EtcdPeerCA, "ETCD_CA_CERT", "ETCD_CA_KEY", gz)
	if err == nil {
		var p *certs.Pair
		if p, err = m.EtcdPeerCA.IssueEtcdPeer(certs.Request{CommonName: host, DNSNames: []string{host}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}); err == nil {
			vals["ETCD_PEER_CERT"], vals["ETCD_PEER_KEY"] = gz(p.CertPEM), b64(p.KeyPEM)
		}
	}
	m.EtcdClientCA = m.EtcdPeerCA
	if o.SeparateEtcdAPIServerCA {
		m.EtcdClientCA = newCA("Kubernetes etcd-apiserver")
	}
	caVals(m.EtcdClientCA, "ETCD_APISERVER_CA_CERT", "ETCD_APISERVER_CA_KEY", gz)
	if err == nil {
		var p *certs.Pair
		if p, err = m.EtcdClientCA.IssueEtcdServer(certs.Request{CommonName: kubeenv.MemberName(host), DNSNames: []string{host, "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}); err == nil {
			vals["ETCD_APISERVER_SERVER_CERT"], vals["ETCD_APISERVER_SERVER_KEY"] = gz(p.CertPEM), b64(p.KeyPEM)
		}
	}
	client(m.EtcdClientCA, "etcd-client", "ETCD_APISERVER_CLIENT_CERT", "ETCD_APISERVER_CLIENT_KEY", gz)
	if err != nil {
		return nil, fmt.Errorf("kube-up master fixture: %w", err)
	}
	if o.DevelVersion == "" {
		o.DevelVersion = DefaultDevelVersion
	}
	if m.ServerTar, err = ServerTarball(o.DevelVersion); err != nil {
		return nil, err
	}
	if m.ManifestsTar, err = ManifestsTarball(o.DevelVersion); err != nil {
		return nil, err
	}
	vals["SERVER_BINARY_TAR_HASH"], vals["KUBE_MANIFESTS_TAR_HASH"] = kubeenv.SHA512Hex(m.ServerTar), kubeenv.SHA512Hex(m.ManifestsTar)
	if m.KubeEnv, err = fill("testdata/master-kube-env.yaml", vals); err != nil {
		return nil, err
	}
	if m.MasterCerts, err = fill("testdata/kube-master-certs.yaml", vals); err != nil {
		return nil, err
	}
	return m, nil
}

func fill(path string, vals map[string]string) (string, error) {
	b, err := fixtures.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(b)
	for k, v := range vals {
		s = strings.ReplaceAll(s, "@"+k+"@", v)
	}
	if i := strings.Index(s, "'@"); i >= 0 {
		return "", fmt.Errorf("%s: placeholder left unfilled near %q", path, s[i:min(len(s), i+40)])
	}
	return s, nil
}

// Parsed returns the metadata as kubeenv.Master.
func (m *Master) Parsed() (kubeenv.Master, error) {
	return kubeenv.ParseMaster(m.KubeEnv, m.MasterCerts)
}
