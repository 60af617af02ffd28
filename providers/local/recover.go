package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
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

// nodeRecover stops every replica and runs 'hamaster-node recover' on
// name's data (the etcd server lives in hamaster-node only).
func (in *instances) nodeRecover(ctx context.Context, name string, extra ...string) (providers.Replica, error) {
	rep, err := in.Get(ctx, name)
	if err != nil {
		return rep, err
	}
	if err := in.stopAll(ctx); err != nil {
		return rep, err
	}
	bin, err := in.p.nodeBinary()
	if err != nil {
		return rep, err
	}
	args := append([]string{"recover", "--env-file", vm.Layout{Dir: in.p.l.replica(name)}.EnvFile()}, extra...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return rep, fmt.Errorf("replica %s: hamaster-node %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return rep, nil
}

// ForceNewCluster implements providers.Recoverer.
func (in *instances) ForceNewCluster(ctx context.Context, name string) error {
	etcdDir := filepath.Join(in.p.l.replica(name), "data", "etcd")
	if _, err := os.Stat(etcdDir); err != nil {
		return fmt.Errorf("replica %s has no etcd data to recover from: %w", name, err)
	}
	// Copy the data aside first: force-new-cluster rewrites it in place.
	aside := fmt.Sprintf("%s.before-force-new-cluster-%d", etcdDir, time.Now().Unix())
	if err := in.stopAll(ctx); err != nil {
		return err
	}
	if err := os.CopyFS(aside, os.DirFS(etcdDir)); err != nil {
		return fmt.Errorf("replica %s: copy its etcd data aside before rewriting it: %w", name, err)
	}
	rep, err := in.nodeRecover(ctx, name)
	if err != nil {
		return err
	}
	return in.bootAlone(ctx, rep)
}

// RestoreSnapshot implements providers.Recoverer.
func (in *instances) RestoreSnapshot(ctx context.Context, name, snapshotPath string) error {
	rep, err := in.nodeRecover(ctx, name, "--snapshot", snapshotPath)
	if err != nil {
		return err
	}
	return in.bootAlone(ctx, rep)
}

// bootAlone boots the replica with an etcd environment naming itself only.
func (in *instances) bootAlone(ctx context.Context, rep providers.Replica) error {
	tmpl := rep.Template.Clone()
	tmpl.Env[nodeapi.KeyInitialEtcdCluster] = rep.Name + "=" + providers.PeerURL(rep.Address)
	tmpl.Env[nodeapi.KeyEtcdInitialClusterState] = "existing"
	if err := in.boot(ctx, rep.Name, tmpl); err != nil {
		return fmt.Errorf("boot replica %s alone: %w", rep.Name, err)
	}
	return nil
}
