package workflows

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hamaster/hamaster/internal/fsutil"
)

// FlavorFile records a cluster's flavor: <state-dir>/<cluster>/flavor,
// one name, written before the first step that may change the cluster
// (Runner.BeforeChange), so a
// later command (with or without --flavor) treats the masters as the same
// format.
func FlavorFile(stateDir, cluster string) string {
	return filepath.Join(stateDir, cluster, "flavor")
}

// LoadFlavor is the cluster's recorded flavor, "" when none is.
func LoadFlavor(stateDir, cluster string) (string, error) {
	b, err := os.ReadFile(FlavorFile(stateDir, cluster))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the cluster's flavor: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// recordFlavor writes the cluster's flavor when none is recorded yet.
func (d *Deps) recordFlavor() error {
	rec, err := LoadFlavor(d.StateDir, d.Cluster)
	if err != nil || rec != "" {
		return err
	}
	if err := os.MkdirAll(d.clusterDir(), 0o700); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(FlavorFile(d.StateDir, d.Cluster), []byte(d.Flavor().Name()+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the cluster's flavor: %w", err)
	}
	return nil
}
