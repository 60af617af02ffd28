package etcdmember

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/errkind"
)

// SnapshotInfo describes a snapshot taken by Snapshot.
type SnapshotInfo struct {
	Size     int64  // bytes written
	SHA256   string // hex SHA-256 of exactly the bytes written
	Endpoint string // client URL of the member it was taken from
	// Revision is the source member's store revision just before the
	// snapshot was taken: the snapshot holds at least this revision.
	Revision int64
}

// Snapshot streams a point-in-time snapshot of the keyspace (etcd's
// maintenance API) to w, hashing it on the way. It is taken from one healthy
// voter, a follower by preference, the one with the highest raft index
// among equals. If no voter is healthy it is an errkind.Unavailable error.
// On error w may have received part of the snapshot.
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	var cands []Member
	for _, m := range ms {
		if !m.Learner && m.Healthy {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		return SnapshotInfo{}, errkind.Errorf(errkind.Unavailable, "etcd snapshot: no healthy voter")
	}
	// Followers first (a snapshot loads the member serving it), then the
	// most up to date.
	slices.SortStableFunc(cands, func(a, b Member) int {
		if a.Leader != b.Leader {
			if a.Leader {
				return 1
			}
			return -1
		}
		return cmp.Compare(b.RaftIndex, a.RaftIndex)
	})
	src := cands[0]
	src.ClientURLs = src.ClientURLs[:1]
	info := SnapshotInfo{Endpoint: src.ClientURLs[0]}
	err = c.withClientFor([]Member{src}, func(cli *clientv3.Client) error {
		// The snapshot stream carries no revision; ask the same member
		// just before.
		st, err := cli.Status(ctx, info.Endpoint)
		if err != nil {
			return err
		}
		if st.Header != nil {
			info.Revision = st.Header.Revision
		}
		resp, err := cli.SnapshotWithVersion(ctx)
		if err != nil {
			return err
		}
		defer resp.Snapshot.Close()
		if resp.Header != nil && resp.Header.Revision > info.Revision {
			info.Revision = resp.Header.Revision
		}
		h := sha256.New()
		info.Size, err = io.Copy(io.MultiWriter(w, h), resp.Snapshot)
		if err != nil {
			return err
		}
		info.SHA256 = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("etcd snapshot from %s: %w", src.label(), err)
	}
	c.log.InfoContext(ctx, "took etcd snapshot", "from", info.Endpoint, "bytes", info.Size, "revision", info.Revision)
	return info, nil
}

// SaveSnapshot writes a Snapshot to path atomically: it goes to a temporary
// file in the same directory (mode 0600), is synced and renamed over path,
// and the directory is synced. On error path is untouched and the temporary
// file removed.
func (c *Client) SaveSnapshot(ctx context.Context, path string) (info SnapshotInfo, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("save etcd snapshot to %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save etcd snapshot to %s: %w", path, err)
	}
	if info, err = c.Snapshot(ctx, f); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save etcd snapshot to %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save etcd snapshot to %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save etcd snapshot to %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save etcd snapshot to %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		// The snapshot is in place; only its durability across a crash
		// is in doubt.
		return info, fmt.Errorf("save etcd snapshot to %s: sync directory: %w", path, err)
	}
	return info, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
