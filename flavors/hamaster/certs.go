package hamaster

import (
	"fmt"
	"net"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers"
)

// IssueReplicaCertificates implements flavors.ReplicaCertIssuer:
// ReplicaFiles.
func (*Flavor) IssueReplicaCertificates(ca *certs.CA, name, address string, sans certs.APIServerSANs) (map[string][]byte, error) {
	return ReplicaFiles(ca, name, address, sans)
}

// ReplicaFiles issues a hamaster master's certificates from ca, as the
// files of its template (the replica runtime's base names,
// dataplane/nodeapi): etcd peer and server for its own name and address,
// and the apiserver serving certificate with the cluster-wide SANs
// (static IP, DNS names, the service IP of shared.ServiceCIDR,
// certs.DefaultServiceCIDR when empty, kubernetes.*) plus its own name
// and address. The CA certificate is included. The local provider's
// master 0 gets its own from it too (local.UpOptions.Certificates).
func ReplicaFiles(ca *certs.CA, name, address string, shared certs.APIServerSANs) (map[string][]byte, error) {
	ip := net.ParseIP(address)
	if ip == nil {
		return nil, fmt.Errorf("replica %s: address %q is not an IP", name, address)
	}
	req := certs.Request{CommonName: name, DNSNames: []string{name, "localhost"}, IPs: []net.IP{ip, net.IPv4(127, 0, 0, 1)}}
	peer, err := ca.IssueEtcdPeer(req)
	if err != nil {
		return nil, fmt.Errorf("issue etcd peer certificate for %s: %w", name, err)
	}
	server, err := ca.IssueEtcdServer(req)
	if err != nil {
		return nil, fmt.Errorf("issue etcd server certificate for %s: %w", name, err)
	}
	sans := shared
	if sans.ServiceCIDR == "" {
		sans.ServiceCIDR = certs.DefaultServiceCIDR // the in-cluster "kubernetes" service IP
	}
	sans.ReplicaIPs = append(append([]string(nil), shared.ReplicaIPs...), address)
	sans.ReplicaNames = append(append([]string(nil), shared.ReplicaNames...), name)
	api, err := ca.IssueAPIServer(sans, certs.ECDSA, 0)
	if err != nil {
		return nil, fmt.Errorf("issue apiserver certificate for %s: %w", name, err)
	}
	return map[string][]byte{
		providers.FileCACert:         ca.CertPEM,
		providers.FileEtcdPeerCert:   peer.CertPEM,
		providers.FileEtcdPeerKey:    peer.KeyPEM,
		providers.FileEtcdServerCert: server.CertPEM,
		providers.FileEtcdServerKey:  server.KeyPEM,
		providers.FileAPIServerCert:  api.CertPEM,
		providers.FileAPIServerKey:   api.KeyPEM,
	}, nil
}
