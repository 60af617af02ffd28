package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// States of etcd in Status.Etcd.
const (
	EtcdStarting = "starting" // started, not yet joined/ready
	EtcdRunning  = "running"  // the member serves
	EtcdFailed   = "failed"   // failed to start or died; retried with backoff
	EtcdStopped  = "stopped"  // the node stopped cleanly (final status)
)

// States of the control-plane stand-in in Status.APIServer.
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
	StaticIP      string    `json:"static_ip,omitempty"`
	StaticIPError string    `json:"static_ip_error,omitempty"`
	Version       string    `json:"version"`
	Updated       time.Time `json:"updated"`
}

// ReadStatus reads a status file written by a node.
func ReadStatus(path string) (Status, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Status{}, fmt.Errorf("read node status: %w", err)
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return Status{}, fmt.Errorf("read node status %s: %w", path, err)
	}
	return s, nil
}

// writeFileAtomic writes data to a temporary file next to path and renames
// it over path, so readers see the old or the new content, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return werr
	}
	return nil
}
