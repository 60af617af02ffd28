package lbproxy

import (
	"time"

	"github.com/hamaster/hamaster/internal/fsutil"
)

// Status is what a running proxy writes to its status file after every
// health-check round and reload.
type Status struct {
	PID    int    `json:"pid"`
	Listen string `json:"listen"`
	// Serving is true once the listener is bound (false in the final
	// status written on exit).
	Serving bool           `json:"serving"`
	Targets []TargetStatus `json:"targets"`
	Updated time.Time      `json:"updated"`
}

// TargetStatus is one target's health as the proxy sees it.
type TargetStatus struct {
	Name     string `json:"name"`
	Address  string `json:"address"`
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining"`
	// LastError is the last failed check's error ("" after a success).
	LastError string `json:"last_error"`
	// LastChecked is when the last check finished (zero: not yet checked).
	LastChecked time.Time `json:"last_checked"`
	// ActiveConnections are proxied connections open to this target now.
	ActiveConnections int `json:"active_connections"`
}

// Target returns the status of the target named name, if listed.
func (s Status) Target(name string) (TargetStatus, bool) {
	for _, t := range s.Targets {
		if t.Name == name {
			return t, true
		}
	}
	return TargetStatus{}, false
}

// ReadStatus reads a status file written by Run.
func ReadStatus(path string) (Status, error) {
	return fsutil.ReadJSON[Status](path, "lb status")
}
