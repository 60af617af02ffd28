package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hamaster/hamaster/dataplane/node"
	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/providers"
)

var _ providers.Recoverer = (*instances)(nil)

// stopAll stops every replica's process.
func (in *instances) stopAll(ctx context.Context) error {
	rs, err := in.List(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := in.proc(r.Name).stop(ctx, 15*time.Second); err != nil {
			return fmt.Errorf("stop replica %s: %w", r.Name, err)
		}
	}
	return nil
}

// recoveryConfig stops every replica and loads name's node config.
func (in *instances) recoveryConfig(ctx context.Context, name string) (providers.Replica, node.Config, error) {
	rep, err := in.Get(ctx, name)
	if err != nil {
		return rep, node.Config{}, err
	}
	if err := in.stopAll(ctx); err != nil {
		return rep, node.Config{}, err
	}
	cfg, err := node.LoadEnvFile(vm.Layout{Dir: in.p.l.replica(name)}.EnvFile())
	if err != nil {
		return rep, cfg, fmt.Errorf("replica %s: %w", name, err)
	}
	return rep, cfg, nil
}

// ForceNewCluster implements providers.Recoverer.
func (in *instances) ForceNewCluster(ctx context.Context, name string) error {
	rep, cfg, err := in.recoveryConfig(ctx, name)
	if err != nil {
		return err
	}
	etcdDir := filepath.Join(cfg.DataDir, "etcd")
	aside := fmt.Sprintf("%s.before-force-new-cluster-%d", etcdDir, time.Now().Unix())
	if err := os.CopyFS(aside, os.DirFS(etcdDir)); err != nil {
		return fmt.Errorf("replica %s: copy its etcd data aside before rewriting it: %w", name, err)
	}
	if err := node.ForceNewCluster(ctx, cfg); err != nil {
		return err
	}
	return in.bootAlone(ctx, rep)
}

// RestoreSnapshot implements providers.Recoverer.
func (in *instances) RestoreSnapshot(ctx context.Context, name, snapshotPath string) error {
	rep, cfg, err := in.recoveryConfig(ctx, name)
	if err != nil {
		return err
	}
	token := fmt.Sprintf("hamaster-restore-%d", time.Now().UnixNano())
	if _, err := node.RestoreSnapshot(cfg, snapshotPath, token); err != nil {
		return err
	}
	return in.bootAlone(ctx, rep)
}

// bootAlone boots the replica with an etcd environment naming itself only.
func (in *instances) bootAlone(ctx context.Context, rep providers.Replica) error {
	tmpl := rep.Template.Clone()
	tmpl.Env[node.KeyInitialEtcdCluster] = rep.Name + "=" + providers.PeerURL(rep.Address)
	tmpl.Env[node.KeyEtcdInitialClusterState] = node.ClusterStateExisting
	if err := in.boot(ctx, rep.Name, tmpl); err != nil {
		return fmt.Errorf("boot replica %s alone: %w", rep.Name, err)
	}
	return nil
}
