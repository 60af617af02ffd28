package providers

import (
	"fmt"
	"net"
	"sort"
	"strings"

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
