package kubeenv

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// kube-env keys hamaster reads or rewrites (names as in cluster/gce/util.sh
// build-linux-kube-env and configure-helper.sh). Everything else is copied
// verbatim when a master is cloned.
const (
	// InitialEtcdCluster is a comma list of the masters' hostnames
	// (replicate-master-instance appends the new replica's name).
	InitialEtcdCluster = "INITIAL_ETCD_CLUSTER"
	// InitialEtcdClusterState is "existing" for a replica joining
	// (replicate-master-instance); absent or "new" on master 0.
	InitialEtcdClusterState = "INITIAL_ETCD_CLUSTER_STATE"
	// EtcdCACert/EtcdCAKey sign the etcd peer certificates
	// (create-etcd-certs); EtcdPeerCert/EtcdPeerKey are this master's.
	// Certificates are gzip then base64, keys base64
	// (create-master-etcd-auth decodes them).
	EtcdCACert   = "ETCD_CA_CERT"
	EtcdCAKey    = "ETCD_CA_KEY"
	EtcdPeerCert = "ETCD_PEER_CERT"
	EtcdPeerKey  = "ETCD_PEER_KEY"
	// KubeVersion is not a kube-up key (kube-up ships binaries in a
	// tarball); hamaster's fakes and the local provider read it.
	KubeVersion = "KUBE_VERSION"
	// APIServerExtraArgs are extra apiserver flags, space-separated, as
	// hamaster's data plane reads them (kube-up's nearest is
	// APISERVER_TEST_ARGS).
	APIServerExtraArgs = "APISERVER_EXTRA_ARGS"
	// APIServerTestArgs are a kube-up master's extra apiserver flags,
	// space-separated (configure-kubeapiserver.sh start-kube-apiserver:
	// params="... ${APISERVER_TEST_ARGS:-} ...").
	APIServerTestArgs = "APISERVER_TEST_ARGS"
	// MasterName is the first master's name (KUBERNETES_MASTER_NAME).
	MasterName = "KUBERNETES_MASTER_NAME"
	// EtcdVersion is the etcd image version.
	EtcdVersion = "ETCD_VERSION"
)

// kube-master-certs keys: the apiserver's etcd client material, signed by
// a CA of its own (create-etcd-apiserver-certs; configure-helper.sh
// create-master-etcd-apiserver-auth writes them to files). Certificates
// and keys are plain base64 here.
const (
	EtcdAPIServerCACert     = "ETCD_APISERVER_CA_CERT"
	EtcdAPIServerCAKey      = "ETCD_APISERVER_CA_KEY"
	EtcdAPIServerServerCert = "ETCD_APISERVER_SERVER_CERT"
	EtcdAPIServerServerKey  = "ETCD_APISERVER_SERVER_KEY"
	EtcdAPIServerClientCert = "ETCD_APISERVER_CLIENT_CERT"
	EtcdAPIServerClientKey  = "ETCD_APISERVER_CLIENT_KEY"
	// The apiserver's serving certificate and key (in kube-master-certs)
	// and the cluster CA (in kube-env).
	KubeAPIServerCert = "KUBEAPISERVER_CERT"
	KubeAPIServerKey  = "KUBEAPISERVER_KEY"
	MasterCert        = "MASTER_CERT"
	MasterKey         = "MASTER_KEY"
	CACert            = "CA_CERT"
)

// States of InitialEtcdClusterState.
const (
	StateNew      = "new"
	StateExisting = "existing"
)

// An EtcdCluster is one of a kube-up master's two etcd servers
// (configure-helper.sh start-etcd-servers: prepare-etcd-manifest "" for
// the main cluster, "-events" for events).
type EtcdCluster struct {
	// Name is "main" or "events".
	Name string
	// Suffix is prepare-etcd-manifest's suffix: "" or "-events"; the
	// data dir is /var/etcd/data<suffix>.
	Suffix string
	// ClientPort is served on 127.0.0.1; PeerPort on the master's address.
	ClientPort, PeerPort int
}

// The two etcd clusters every kube-up master runs.
var (
	EtcdMain   = EtcdCluster{Name: "main", ClientPort: 2379, PeerPort: 2380}
	EtcdEvents = EtcdCluster{Name: "events", Suffix: "-events", ClientPort: 4002, PeerPort: 2381}
)

// MemberName is the etcd member name of the master with this hostname
// (etcd.manifest: --name etcd-{{ hostname }}).
func MemberName(hostname string) string { return "etcd-" + hostname }

// HostOfMember is the hostname behind a member name, "" when name is not
// etcd-<hostname>.
func HostOfMember(name string) string {
	h, ok := strings.CutPrefix(name, "etcd-")
	if !ok {
		return ""
	}
	return h
}

// PeerURL is the peer URL the master advertises on cluster c
// (etcd.manifest: --initial-advertise-peer-urls
// {{ etcd_protocol }}://{{ hostname }}:{{ server_port }}). kube-up's
// masters always have ETCD_CA_CERT and peer certificates, so https.
func PeerURL(c EtcdCluster, hostname string) string {
	return "https://" + net.JoinHostPort(hostname, strconv.Itoa(c.PeerPort))
}

var hostRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// Hosts returns INITIAL_ETCD_CLUSTER's hostnames; when the key is empty a
// master's own hostname is the whole cluster (prepare-etcd-manifest:
// ${INITIAL_ETCD_CLUSTER:-${host_name}}).
func Hosts(env map[string]string, self string) ([]string, error) {
	v := strings.TrimSpace(env[InitialEtcdCluster])
	if v == "" {
		return []string{self}, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if !hostRE.MatchString(h) {
			return nil, fmt.Errorf("%s=%q: %q is not a hostname (kube-up lists the masters' hostnames, e.g. 'kubernetes-master,kubernetes-master-a1b')", InitialEtcdCluster, v, h)
		}
		if seen[h] {
			return nil, fmt.Errorf("%s=%q: %s listed twice", InitialEtcdCluster, v, h)
		}
		seen[h] = true
		out = append(out, h)
	}
	return out, nil
}

// InitialClusterFlag is etcd's --initial-cluster for cluster c built from
// the hostnames as prepare-etcd-manifest does:
// etcd-<host>=https://<host>:<peer port>,...
func InitialClusterFlag(c EtcdCluster, hosts []string) string {
	parts := make([]string, 0, len(hosts))
	for _, h := range hosts {
		parts = append(parts, MemberName(h)+"="+PeerURL(c, h))
	}
	return strings.Join(parts, ",")
}

// JoinEnv rewrites a copied kube-env for a replica joining the masters
// named in hosts (the new one last), as replicate-master-instance does:
// INITIAL_ETCD_CLUSTER=hosts, INITIAL_ETCD_CLUSTER_STATE=existing. The
// map is changed in place.
func JoinEnv(env map[string]string, hosts []string) {
	env[InitialEtcdCluster] = strings.Join(hosts, ",")
	env[InitialEtcdClusterState] = StateExisting
}

// DecodeGzipBase64 decodes kube-env's certificates (base64 of gzip; kube-up
// create-etcd-certs) and, leniently, plain base64.
func DecodeGzipBase64(key, v string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, fmt.Errorf("%s is not base64: %w", key, err)
	}
	if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		return raw, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: gzip: %w", key, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: gzip: %w", key, err)
	}
	return out, nil
}

// EncodeGzipBase64 is kube-up's `gzip | base64` of a certificate.
func EncodeGzipBase64(b []byte) string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// EncodeBase64 is kube-up's `base64` of a key.
func EncodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
