package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ForceNewCluster rewrites the replica's etcd data into a one-member
// cluster, as etcd's --force-new-cluster does: etcd is started once on the
// data with ForceNewCluster (which commits the removal of every other
// member), waited for until it serves, and stopped. The replica's process
// must be stopped; its next start runs alone on the rewritten data.
func ForceNewCluster(ctx context.Context, cfg Config) error {
	ec, err := cfg.embedConfig()
	if err != nil {
		return err
	}
	if _, err := os.Stat(ec.Dir); err != nil {
		return fmt.Errorf("force new cluster from %s: no etcd data: %w", cfg.Name, err)
	}
	ec.ForceNewCluster = true
	ec.ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("force new cluster from %s: start etcd: %w", cfg.Name, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("force new cluster from %s: %w", cfg.Name, err)
	case <-ctx.Done():
		return fmt.Errorf("force new cluster from %s: wait until it serves: %w", cfg.Name, ctx.Err())
	}
	// The membership change is committed once the server is ready and
	// leads: wait for the leader to be itself.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for e.Server.Leader() != e.Server.MemberID() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("force new cluster from %s: wait for leadership: %w", cfg.Name, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// RestoreSnapshot replaces the replica's etcd data with a restore of the
// snapshot file, with etcd's "snapshot restore" semantics: the file's
// integrity hash is verified first, the result is a one-member cluster of
// this replica with a new cluster ID (token). The previous data is kept
// aside as DATA_DIR/etcd.before-restore-<unix time>. The replica's process
// must be stopped.
func RestoreSnapshot(cfg Config, snapshotPath, token string) (keptAside string, err error) {
	tmp := cfg.etcdDir() + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := RestoreSnapshotTo(snapshotPath, cfg.Name, cfg.EtcdPeerURL(), tmp, token); err != nil {
		return "", err
	}
	aside := fmt.Sprintf("%s.before-restore-%d", cfg.etcdDir(), time.Now().Unix())
	if err := os.Rename(cfg.etcdDir(), aside); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("keep the old etcd data aside: %w", err)
		}
		aside = ""
	}
	if err := os.Rename(tmp, cfg.etcdDir()); err != nil {
		return "", fmt.Errorf("put the restored data in place: %w", err)
	}
	return aside, nil
}

// RestoreSnapshotTo restores the snapshot file into outDir (which must not
// exist) with etcd's "snapshot restore": the file's integrity hash
// verified first, a one-member cluster of the member name at peerURL, a
// new cluster ID (token). For masters whose etcd runs elsewhere (the
// kubeadm flavor uploads the result to its master).
func RestoreSnapshotTo(snapshotPath, name, peerURL, outDir, token string) error {
	rc := snapshot.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                name,
		OutputDataDir:       outDir,
		PeerURLs:            []string{peerURL},
		InitialCluster:      name + "=" + peerURL,
		InitialClusterToken: token,
	}
	if err := snapshot.NewV3(zap.NewNop()).Restore(rc); err != nil {
		_ = os.RemoveAll(outDir)
		return fmt.Errorf("restore snapshot %s (hash verified first): %w", snapshotPath, err)
	}
	return nil
}
