package workflows

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultKeepSnapshots is how many etcd snapshots a cluster keeps when
// --keep-snapshots is not given.
const DefaultKeepSnapshots = 10

// SnapshotFile is one saved etcd snapshot.
type SnapshotFile struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"time"`
}

// SnapshotDir is where a cluster's etcd snapshots are saved.
func SnapshotDir(stateDir, cluster string) string {
	return filepath.Join(stateDir, cluster, "snapshots")
}

// ListSnapshots returns the cluster's snapshots, newest first.
func ListSnapshots(stateDir, cluster string) ([]SnapshotFile, error) {
	dir := SnapshotDir(stateDir, cluster)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []SnapshotFile
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".db") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, SnapshotFile{Path: filepath.Join(dir, e.Name()), Size: info.Size(), ModTime: info.ModTime()})
	}
	// Names start with a UTC timestamp: name order is time order.
	sort.Slice(out, func(i, j int) bool { return filepath.Base(out[i].Path) > filepath.Base(out[j].Path) })
	return out, nil
}

// pruneSnapshots keeps the newest keep snapshots (and always keep, the
// one just taken) and deletes the rest.
func pruneSnapshots(stateDir, cluster string, keep int, keepPath string) error {
	if keep <= 0 {
		keep = DefaultKeepSnapshots
	}
	ss, err := ListSnapshots(stateDir, cluster)
	if err != nil {
		return err
	}
	n := 0
	for _, s := range ss {
		if s.Path == keepPath || n < keep {
			n++
			continue
		}
		if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("prune snapshot %s: %w", s.Path, err)
		}
	}
	return nil
}
