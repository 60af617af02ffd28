package kubeenv

import (
	"fmt"
	"maps"
	"net"

	"github.com/hamaster/hamaster/certs"
)

// Master is a kube-up master's two metadata items as parsed key/value
// maps, values exactly as stored (base64, or base64 of gzip for etcd
// certificates).
type Master struct {
	Env   map[string]string // kube-env
	Certs map[string]string // kube-master-certs
}

// ParseMaster parses both items.
func ParseMaster(env, masterCerts string) (Master, error) {
	e, err := Parse(env)
	if err != nil {
		return Master{}, fmt.Errorf("%s: %w", KeyEnv, err)
	}
	c, err := Parse(masterCerts)
	if err != nil {
		return Master{}, fmt.Errorf("%s: %w", KeyCerts, err)
	}
	return Master{Env: e, Certs: c}, nil
}

// Clone is a deep copy.
func (m Master) Clone() Master {
	return Master{Env: maps.Clone(m.Env), Certs: maps.Clone(m.Certs)}
}

// ca decodes a CA kept as <prefix>_CERT (gzip+base64) and <prefix>_KEY
// (base64) in kv.
func ca(kv map[string]string, certKey, keyKey, item string) (*certs.CA, error) {
	if kv[certKey] == "" || kv[keyKey] == "" {
		return nil, fmt.Errorf("%s has no %s and %s: not a kube-up master with etcd TLS (cluster/gce/util.sh create-master creates them)", item, certKey, keyKey)
	}
	crt, err := DecodeGzipBase64(certKey, kv[certKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", item, err)
	}
	key, err := DecodeGzipBase64(keyKey, kv[keyKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", item, err)
	}
	c, err := certs.ParseCA(crt, key)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", item, certKey, keyKey, err)
	}
	return c, nil
}

// EtcdPeerCA is the CA that signs the masters' etcd peer certificates
// (kube-env ETCD_CA_CERT / ETCD_CA_KEY).
func (m Master) EtcdPeerCA() (*certs.CA, error) { return ca(m.Env, EtcdCACert, EtcdCAKey, KeyEnv) }

// EtcdAPIServerCA is the CA of main etcd's client port: it signs each
// master's etcd serving certificate and the apiserver's etcd client
// certificate (kube-master-certs ETCD_APISERVER_CA_CERT / _KEY).
func (m Master) EtcdAPIServerCA() (*certs.CA, error) {
	return ca(m.Certs, EtcdAPIServerCACert, EtcdAPIServerCAKey, KeyCerts)
}

// HasEtcdAPIServerTLS reports whether main etcd's client port uses mTLS:
// all six ETCD_APISERVER_* keys set (configure-helper.sh
// prepare-etcd-manifest, configure-kubeapiserver.sh configure-etcd-params).
func (m Master) HasEtcdAPIServerTLS() bool {
	for _, k := range []string{EtcdAPIServerCACert, EtcdAPIServerCAKey, EtcdAPIServerServerCert, EtcdAPIServerServerKey, EtcdAPIServerClientCert, EtcdAPIServerClientKey} {
		if m.Certs[k] == "" {
			return false
		}
	}
	return true
}

// Replicate builds the metadata of a new master named replica joining the
// masters named in existing, as cluster/gce/gci/master-helper.sh
// replicate-master-instance does:
//   - kube-env: INITIAL_ETCD_CLUSTER = existing + replica,
//     INITIAL_ETCD_CLUSTER_STATE = existing, and a new etcd peer
//     certificate for the replica signed by ETCD_CA_CERT/ETCD_CA_KEY
//     (create-etcd-certs: CN and SAN the hostname, plus 127.0.0.1);
//   - kube-master-certs: a new etcd serving certificate and apiserver etcd
//     client certificate signed by ETCD_APISERVER_CA_* (create-etcd-apiserver-certs),
//     when the master has them;
//   - every other key copied verbatim (MASTER_CERT included: kube-up's
//     apiserver certificate covers the static IP, which becomes the LB's).
//
// Unlike kube-up, the source is never modified and nothing is read over
// SSH: the caller passes the metadata it read through the Compute API.
func Replicate(src Master, existing []string, replica string) (Master, error) {
	if !hostRE.MatchString(replica) {
		return Master{}, fmt.Errorf("replica name %q is not a hostname", replica)
	}
	hosts := make([]string, 0, len(existing)+1)
	for _, h := range existing {
		if h != replica {
			hosts = append(hosts, h)
		}
	}
	hosts = append(hosts, replica)
	out := src.Clone()
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	if out.Certs == nil {
		out.Certs = map[string]string{}
	}
	JoinEnv(out.Env, hosts)

	peerCA, err := src.EtcdPeerCA()
	if err != nil {
		return Master{}, err
	}
	req := certs.Request{CommonName: replica, DNSNames: []string{replica}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	peer, err := peerCA.IssueEtcdPeer(req)
	if err != nil {
		return Master{}, fmt.Errorf("replica %s: %w", replica, err)
	}
	out.Env[EtcdPeerCert] = EncodeGzipBase64(peer.CertPEM)
	out.Env[EtcdPeerKey] = EncodeBase64(peer.KeyPEM)

	if !src.HasEtcdAPIServerTLS() {
		return out, nil
	}
	apiCA, err := src.EtcdAPIServerCA()
	if err != nil {
		return Master{}, err
	}
	server, err := apiCA.IssueEtcdServer(certs.Request{CommonName: MemberName(replica), DNSNames: []string{replica, "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return Master{}, fmt.Errorf("replica %s: %w", replica, err)
	}
	client, err := apiCA.IssueClient("etcd-client", nil, certs.ECDSA)
	if err != nil {
		return Master{}, fmt.Errorf("replica %s: %w", replica, err)
	}
	out.Certs[EtcdAPIServerServerCert] = EncodeGzipBase64(server.CertPEM)
	out.Certs[EtcdAPIServerServerKey] = EncodeBase64(server.KeyPEM)
	out.Certs[EtcdAPIServerClientCert] = EncodeGzipBase64(client.CertPEM)
	out.Certs[EtcdAPIServerClientKey] = EncodeBase64(client.KeyPEM)
	return out, nil
}
