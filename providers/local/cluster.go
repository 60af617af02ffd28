// Package local is hamaster's embedded provider: a replica ("VM") is a
// detached hamaster-node process running real etcd and the apiserver (a
// stand-in, or kube-apiserver with --control-plane real) on its own
// address of this machine (127.0.N.x, or 198.18.N.x on lo for the real
// apiserver: network.go; N derived from the cluster name); its data dir is
// its persistent disk; the static IP is .1 of the same /24; the load
// balancer is a hamaster-node lb process bound to that address. Nothing needs installing but, for the real apiserver, its
// binaries (make kube-apiserver). Processes
// outlive the CLI and are found again from the state dir (pid files checked
// against /proc).
package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
)

// ClusterInfo is the local cluster's record, cluster.json.
type ClusterInfo struct {
	Name   string `json:"name"`
	Subnet int    `json:"subnet"`
	// Addresses is AddressesLoopback ("" in older records) or
	// AddressesBenchmark: which /24 N is of.
	Addresses string    `json:"addresses,omitempty"`
	StaticIP  string    `json:"static_ip"`
	Created   time.Time `json:"created"`
	// ControlPlane is what every replica runs behind its apiserver port:
	// nodeapi.ControlPlaneStandin ("" in records older than the choice)
	// or nodeapi.ControlPlaneReal.
	ControlPlane string `json:"control_plane,omitempty"`
	// KubeAPIServerDir holds the real apiserver binaries by version
	// (<dir>/<version>/kube-apiserver); ControlPlane real only.
	KubeAPIServerDir string `json:"kube_apiserver_dir,omitempty"`
}

// Real reports whether the cluster's replicas run the real kube-apiserver.
func (ci ClusterInfo) Real() bool { return ci.ControlPlane == nodeapi.ControlPlaneReal }

// layout names every path of one local cluster.
type layout struct{ dir string }

func (l layout) clusterFile() string { return filepath.Join(l.dir, "cluster.json") }
func (l layout) pki() string         { return filepath.Join(l.dir, "pki") }
func (l layout) serviceAccountKey() string {
	return filepath.Join(l.dir, "pki", "service-account.key")
}
func (l layout) replicas() string         { return filepath.Join(l.dir, "replicas") }
func (l layout) replica(n string) string  { return filepath.Join(l.dir, "replicas", n) }
func (l layout) addresses() string        { return filepath.Join(l.dir, "addresses.json") }
func (l layout) lb() string               { return filepath.Join(l.dir, "lb") }
func (l layout) lbConfig() string         { return filepath.Join(l.dir, "lb", "config.json") }
func (l layout) lbStatus() string         { return filepath.Join(l.dir, "lb", "status.json") }
func (l layout) lbPID() string            { return filepath.Join(l.dir, "lb", "lb.pid") }
func (l layout) lbLog() string            { return filepath.Join(l.dir, "lb", "lb.log") }
func (l layout) rfile(n, f string) string { return filepath.Join(l.dir, "replicas", n, f) }

// DefaultSubnet derives N of the cluster's /24 from its name (1..250).
func DefaultSubnet(cluster string) int {
	h := fnv.New32a()
	h.Write([]byte(cluster))
	return int(h.Sum32()%250) + 1
}

func readClusterInfo(l layout, cluster string) (ClusterInfo, error) {
	var ci ClusterInfo
	b, err := os.ReadFile(l.clusterFile())
	if errors.Is(err, os.ErrNotExist) {
		return ci, errkind.Errorf(errkind.NotFound, "local cluster %q not found in %s (create it with 'hamaster local up --cluster %s')", cluster, filepath.Dir(l.dir), cluster)
	}
	if err != nil {
		return ci, fmt.Errorf("read %s: %w", l.clusterFile(), err)
	}
	if err := json.Unmarshal(b, &ci); err != nil {
		return ci, fmt.Errorf("read %s: %w", l.clusterFile(), err)
	}
	return ci, nil
}

func writeJSON(path string, v any, perm os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, b, perm)
}
