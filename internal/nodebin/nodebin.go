// Package nodebin finds hamaster-node, the binary that holds the etcd
// server (the CLI never links it): the path the operator named, else next
// to the running binary (make build puts them together), else $PATH.
package nodebin

import (
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hamaster/hamaster/errkind"
)

// Name is the binary's file name.
const Name = "hamaster-node"

// Find returns hamaster-node's path: explicit when set (it must exist;
// flag names the setting in the error), else the running binary's
// neighbour, else the one on $PATH.
func Find(explicit, flag string) (string, error) {
	return Sibling(Name, explicit, flag)
}

// Sibling finds the binary called name the way Find finds hamaster-node:
// explicit when set (it must exist), else next to the running binary,
// else on $PATH.
func Sibling(name, explicit, flag string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", errkind.Errorf(errkind.InvalidArgument, "%s: %v", flag, err)
		}
		return explicit, nil
	}
	self := "this binary"
	if exe, err := os.Executable(); err == nil {
		self = filepath.Base(exe)
		cand := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(cand); err == nil {
			return cand, nil
		}
	}
	if b, err := exec.LookPath(name); err == nil {
		return b, nil
	}
	return "", errkind.Errorf(errkind.FailedPrecondition, "%s not found next to %s or on $PATH (run 'make build', or pass %s)", name, self, flag)
}
