package providers

import (
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
)

// Base names of a replica's certificate files in Template.Files (the
// replica runtime's, nodeapi's).
const (
	FileCACert         = nodeapi.FileCACert
	FileEtcdPeerCert   = nodeapi.FileEtcdPeerCert
	FileEtcdPeerKey    = nodeapi.FileEtcdPeerKey
	FileEtcdServerCert = nodeapi.FileEtcdServerCert
	FileEtcdServerKey  = nodeapi.FileEtcdServerKey
	FileAPIServerCert  = nodeapi.FileAPIServerCert
	FileAPIServerKey   = nodeapi.FileAPIServerKey
)

// Environment keys of a replica's template that hamaster itself rewrites
// when cloning (the rest is copied verbatim).
const (
	EnvInitialEtcdCluster      = "INITIAL_ETCD_CLUSTER"
	EnvEtcdInitialClusterState = "ETCD_INITIAL_CLUSTER_STATE"
)

// Ports every replica uses on its own address.
const (
	EtcdClientPort = nodeapi.EtcdClientPort
	EtcdPeerPort   = nodeapi.EtcdPeerPort
	APIServerPort  = nodeapi.APIServerPort
)

// PeerURL is the etcd peer URL of a replica at address.
func PeerURL(address string) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(address, fmt.Sprint(EtcdPeerPort)))
}

// ClientURL is the etcd client URL of a replica at address.
func ClientURL(address string) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(address, fmt.Sprint(EtcdClientPort)))
}

// InitialCluster renders etcd's --initial-cluster (name=peerURL,...) from
// member name → peer URL, sorted by name.
func InitialCluster(peers map[string]string) string {
	names := make([]string, 0, len(peers))
	for n := range peers {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+"="+peers[n])
	}
	return strings.Join(parts, ",")
}

// DefaultServiceCIDR is kube-up's SERVICE_CLUSTER_IP_RANGE: its first
// address, 10.0.0.1, is the in-cluster "kubernetes" service that every
// apiserver certificate covers (ReplicaFiles' default).
const DefaultServiceCIDR = "10.0.0.0/16"

// ReplicaFiles issues a replica's certificates: etcd peer and server for
// its own name and address, and the apiserver serving certificate with the
// cluster-wide SANs (static IP, DNS names, service IP, kubernetes.*) plus
// its own name and address. The CA certificate is included.
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
		sans.ServiceCIDR = DefaultServiceCIDR // the in-cluster "kubernetes" service IP
	}
	sans.ReplicaIPs = append(append([]string(nil), shared.ReplicaIPs...), address)
	sans.ReplicaNames = append(append([]string(nil), shared.ReplicaNames...), name)
	api, err := ca.IssueAPIServer(sans, certs.ECDSA, 0)
	if err != nil {
		return nil, fmt.Errorf("issue apiserver certificate for %s: %w", name, err)
	}
	return map[string][]byte{
		FileCACert:         ca.CertPEM,
		FileEtcdPeerCert:   peer.CertPEM,
		FileEtcdPeerKey:    peer.KeyPEM,
		FileEtcdServerCert: server.CertPEM,
		FileEtcdServerKey:  server.KeyPEM,
		FileAPIServerCert:  api.CertPEM,
		FileAPIServerKey:   api.KeyPEM,
	}, nil
}
