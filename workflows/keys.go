package workflows

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
)

// Private keys live only under <state-dir>/<cluster>/pki/replicas/<name>/
// (and in the replica itself). What the journal and the last-known-good
// copies keep is a template with its key files left out; restoring one
// takes the keys from the pki directory.

func isKeyFile(name string) bool { return strings.HasSuffix(name, ".key") }

// withoutKeys returns a copy of t without its private keys.
func withoutKeys(t providers.Template) providers.Template {
	c := t.Clone()
	for f := range c.Files {
		if isKeyFile(f) {
			delete(c.Files, f)
		}
	}
	return c
}

// replicaPKIDir is where a replica's certificates and keys are kept.
func replicaPKIDir(d *Deps, name string) string {
	return filepath.Join(PKIDir(d.StateDir, d.Cluster), "replicas", name)
}

// syncPKI writes t's certificates and keys to the replica's pki
// directory, so that they match what the replica runs (a replica created by
// 'local up' or cloned from a kube-up master has them only in its
// template).
func syncPKI(d *Deps, name string, t providers.Template) error {
	dir := replicaPKIDir(d, name)
	for f, b := range t.Files {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, f), b, 0o600); err != nil {
			return fmt.Errorf("keep %s's %s under pki/: %w", name, f, err)
		}
	}
	return nil
}

// withKeys fills the key files a redacted template lacks from the pki
// directory.
func withKeys(d *Deps, name string, t providers.Template) (providers.Template, error) {
	c := t.Clone()
	for _, f := range []string{providers.FileEtcdPeerKey, providers.FileEtcdServerKey, providers.FileAPIServerKey} {
		if _, ok := c.Files[f]; ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(replicaPKIDir(d, name), f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return c, fmt.Errorf("read %s's key %s: %w", name, f, err)
		}
		c.Files[f] = b
	}
	return c, nil
}

// removeReplicaSecrets deletes what hamaster kept of a removed replica:
// its certificates and keys under pki/ and its last-known-good template.
func removeReplicaSecrets(d *Deps, name string) error {
	if err := os.RemoveAll(replicaPKIDir(d, name)); err != nil {
		return fmt.Errorf("remove %s's certificates and keys: %w", name, err)
	}
	lkg := filepath.Join(d.clusterDir(), "last-known-good", name+".json")
	if err := os.Remove(lkg); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s's last-known-good template: %w", name, err)
	}
	return nil
}
