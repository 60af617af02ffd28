// Package nodeapi is the contract between hamaster-node (package
// dataplane/node) and whatever boots it (the local provider, the cloud
// fakes' data planes): the keys of its env file and the status file it
// writes. It imports nothing heavy, so a launcher does not link the etcd
// server the node embeds.
package nodeapi

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hamaster/hamaster/internal/fsutil"
)

// Keys of the env file, the local stand-in for a cloud VM's "kube-env"
// metadata. The local provider writes them; LoadEnvFile reads them.
const (
	// KeyNodeName is the etcd member name, e.g. "demo-master-0".
	KeyNodeName = "NODE_NAME"
	// KeyNodeAddress is the replica's loopback address, e.g. 127.0.42.2;
	// etcd and the apiserver bind to it.
	KeyNodeAddress = "NODE_ADDRESS"
	// KeyInitialEtcdCluster is etcd's --initial-cluster: name=https://ip:2380,...
	KeyInitialEtcdCluster = "INITIAL_ETCD_CLUSTER"
	// KeyEtcdInitialClusterState is "new" or "existing".
	KeyEtcdInitialClusterState = "ETCD_INITIAL_CLUSTER_STATE"
	// KeyEtcdClientPort is etcd's client port (default 2379).
	KeyEtcdClientPort = "ETCD_CLIENT_PORT"
	// KeyEtcdPeerPort is etcd's peer port (default 2380).
	KeyEtcdPeerPort = "ETCD_PEER_PORT"
	// KeyEtcdCACert is the CA that signs etcd peer and client certificates.
	KeyEtcdCACert = "ETCD_CA_CERT"
	// KeyEtcdPeerCert is etcd's peer certificate (also used as a client
	// certificate towards other peers).
	KeyEtcdPeerCert = "ETCD_PEER_CERT"
	// KeyEtcdPeerKey is the key of KeyEtcdPeerCert.
	KeyEtcdPeerKey = "ETCD_PEER_KEY"
	// KeyEtcdServerCert is etcd's client-facing serving certificate.
	KeyEtcdServerCert = "ETCD_SERVER_CERT"
	// KeyEtcdServerKey is the key of KeyEtcdServerCert.
	KeyEtcdServerKey = "ETCD_SERVER_KEY"
	// KeyAPIServerPort is the apiserver's port (default 6443), on
	// NODE_ADDRESS and on the static IP while attached.
	KeyAPIServerPort = "APISERVER_PORT"
	// KeyAPIServerCert is the apiserver's serving certificate (required).
	KeyAPIServerCert = "APISERVER_CERT"
	// KeyAPIServerKey is the key of KeyAPIServerCert (required).
	KeyAPIServerKey = "APISERVER_KEY"
	// KeyKubeVersion is the version /version reports, e.g. v1.30.2.
	KeyKubeVersion = "KUBE_VERSION"
	// KeyAPIServerExtraArgs are space-separated apiserver flags.
	KeyAPIServerExtraArgs = "APISERVER_EXTRA_ARGS"
	// KeyDataDir is the "persistent disk"; etcd keeps its data in DATA_DIR/etcd.
	KeyDataDir = "DATA_DIR"
	// KeyStaticIPFile names a file holding zero or one IP: the static IP
	// attached to this replica.
	KeyStaticIPFile = "STATIC_IP_FILE"
	// KeyPIDFile is written with the pid at startup and removed on clean exit.
	KeyPIDFile = "PID_FILE"
	// KeyStatusFile receives the JSON Status.
	KeyStatusFile = "STATUS_FILE"
	// KeyEtcdHeartbeatMS is etcd's heartbeat interval in ms (default 100).
	KeyEtcdHeartbeatMS = "ETCD_HEARTBEAT_MS"
	// KeyEtcdElectionMS is etcd's election timeout in ms (default 1000).
	KeyEtcdElectionMS = "ETCD_ELECTION_MS"
	// KeyEtcdUnsafeNoFsync disables fsync in etcd ("true"; tests only).
	KeyEtcdUnsafeNoFsync = "ETCD_UNSAFE_NO_FSYNC"
	// KeyControlPlane is what serves the apiserver port: ControlPlaneStandin
	// (the default) or ControlPlaneReal.
	KeyControlPlane = "CONTROL_PLANE"
	// KeyKubeAPIServerDir holds the real apiserver binaries by version,
	// <dir>/<KUBE_VERSION>/kube-apiserver with a SHA256SUMS beside it
	// (make kube-apiserver writes them); used when CONTROL_PLANE=real.
	KeyKubeAPIServerDir = "KUBE_APISERVER_DIR"
	// KeyServiceAccountKeyFile is the PEM private key every replica of the
	// cluster signs and verifies service-account tokens with (the same
	// file for all, issued once per cluster like the CA); CONTROL_PLANE=real.
	KeyServiceAccountKeyFile = "SERVICE_ACCOUNT_KEY_FILE"
	// KeyServiceClusterIPRange is kube-up's SERVICE_CLUSTER_IP_RANGE: its
	// first address is the "kubernetes" service IP the apiserver
	// certificates cover (default DefaultServiceClusterIPRange).
	KeyServiceClusterIPRange = "SERVICE_CLUSTER_IP_RANGE"
)

// Control planes a replica can run (KeyControlPlane).
const (
	// ControlPlaneStandin is hamaster-node's own apiserver stand-in:
	// /healthz, /readyz, /version and /kv, in-process, any v1.x version.
	ControlPlaneStandin = "standin"
	// ControlPlaneReal is a real kube-apiserver child process at
	// KUBE_VERSION, from KUBE_APISERVER_DIR.
	ControlPlaneReal = "real"
)

// KubeAPIServerPath is where the real apiserver binary of version lives
// under dir (KUBE_APISERVER_DIR); a SHA256SUMS file beside it records its
// checksum.
func KubeAPIServerPath(dir, version string) string {
	return filepath.Join(dir, version, "kube-apiserver")
}

// Base names of a replica's certificate files (in its template's files,
// written to the VM's certs/ directory).
const (
	FileCACert         = "ca.crt"
	FileEtcdPeerCert   = "etcd-peer.crt"
	FileEtcdPeerKey    = "etcd-peer.key"
	FileEtcdServerCert = "etcd-server.crt"
	FileEtcdServerKey  = "etcd-server.key"
	FileAPIServerCert  = "apiserver.crt"
	FileAPIServerKey   = "apiserver.key"
)

// Ports a replica uses on its own address (the apiserver's is
// KeyAPIServerPort's default).
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
	APIServerPort  = 6443
)

// PinnedKubeVersions are the versions 'make kube-apiserver' builds
// (tools/kube-apiserver/v1.MINOR/go.mod pins each), oldest first; a test
// keeps this list equal to the pins.
func PinnedKubeVersions() []string { return []string{"v1.33.13", "v1.34.4"} }

// NewestPinnedKubeVersion is the newest of PinnedKubeVersions: the default
// version of a real control plane ('local up --control-plane real').
func NewestPinnedKubeVersion() string {
	v := PinnedKubeVersions()
	return v[len(v)-1]
}

// DefaultKubeAPIServerDir is where 'make kube-apiserver' puts the
// binaries: $XDG_CACHE_HOME/hamaster/kube-apiserver, else
// $HOME/.cache/hamaster/kube-apiserver.
func DefaultKubeAPIServerDir() (string, error) {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "hamaster", "kube-apiserver"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("kube-apiserver cache: neither XDG_CACHE_HOME nor HOME is set: %w", err)
	}
	return filepath.Join(home, ".cache", "hamaster", "kube-apiserver"), nil
}

// DefaultServiceClusterIPRange is SERVICE_CLUSTER_IP_RANGE left empty
// (kube-up's; certs.DefaultServiceCIDR, which the certificates use).
const DefaultServiceClusterIPRange = "10.0.0.0/16"

// Initial cluster states.
const (
	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"
)

// Defaults for keys left empty.
const (
	DefaultEtcdClientPort = 2379
	DefaultEtcdPeerPort   = 2380
	DefaultAPIServerPort  = 6443
	DefaultEtcdHeartbeat  = 100 * time.Millisecond
	DefaultEtcdElection   = 1000 * time.Millisecond
)

// States of etcd in Status.Etcd.
const (
	EtcdStarting = "starting" // started, not yet joined/ready
	EtcdRunning  = "running"  // the member serves
	EtcdFailed   = "failed"   // failed to start or died; retried with backoff
	EtcdStopped  = "stopped"  // the node stopped cleanly (final status)
)

// States of the apiserver (stand-in or real) in Status.APIServer.
const (
	APIServerServing = "serving" // listening (see Status.Listeners)
	APIServerRefused = "refused" // did not start: APISERVER_EXTRA_ARGS is bad (see Status.APIServerError)
	APIServerStopped = "stopped" // not started yet, or shut down
)

// Status is what a running node writes to STATUS_FILE: whenever its state
// changes and every ~500 ms.
type Status struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
	// Etcd is one of EtcdStarting, EtcdRunning, EtcdFailed, EtcdStopped.
	Etcd      string `json:"etcd"`
	EtcdError string `json:"etcd_error,omitempty"`
	// EtcdEvents and EtcdEventsError are the same for a kube-up master's
	// events cluster (hamaster-node kube-up-master); empty otherwise.
	EtcdEvents      string `json:"etcd_events,omitempty"`
	EtcdEventsError string `json:"etcd_events_error,omitempty"`
	// APIServer is one of APIServerServing, APIServerRefused, APIServerStopped.
	APIServer      string `json:"apiserver"`
	APIServerError string `json:"apiserver_error,omitempty"`
	// Ready is what /readyz answered last (the local etcd member is a
	// healthy voter); ReadyReason says why not.
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"ready_reason,omitempty"`
	// Listeners are the apiserver's bound addresses: NODE_ADDRESS:port, plus
	// staticIP:port while the static IP is attached.
	Listeners []string `json:"listeners"`
	// StaticIP is the IP STATIC_IP_FILE named when last read; StaticIPError
	// says why it is not (yet) bound or could not be read.
	StaticIP      string `json:"static_ip,omitempty"`
	StaticIPError string `json:"static_ip_error,omitempty"`
	Version       string `json:"version"`
	// ControlPlane is ControlPlaneStandin or ControlPlaneReal; APIServerPID
	// is the real kube-apiserver's process while it runs.
	ControlPlane string    `json:"control_plane,omitempty"`
	APIServerPID int       `json:"apiserver_pid,omitempty"`
	Updated      time.Time `json:"updated"`
}

// ReadStatus reads a status file written by a node.
func ReadStatus(path string) (Status, error) {
	return fsutil.ReadJSON[Status](path, "node status")
}
