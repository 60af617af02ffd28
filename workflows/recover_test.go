package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/workflows"
)

// kill SIGKILLs a replica's process, as a dead VM.
func (e *env) kill(name string) {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.c.Settings.StateDir, e.name, "replicas", name, "node.pid"))
	if err != nil {
		e.t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) put(ctx context.Context, k, v string) {
	e.t.Helper()
	cli := e.etcd(ctx)
	defer cli.Close()
	if _, err := cli.Raw().Put(ctx, k, v); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) get(ctx context.Context, k string) string {
	e.t.Helper()
	cli := e.etcd(ctx)
	defer cli.Close()
	resp, err := cli.Raw().Get(ctx, k)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func (e *env) clusterID(ctx context.Context) uint64 {
	e.t.Helper()
	cli := e.etcd(ctx)
	defer cli.Close()
	resp, err := cli.Raw().MemberList(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.ClusterId
}

// TestRecoverFromSurvivorThenSnapshot: 2 of 3 replicas die (quorum lost);
// recover --from the survivor keeps every key and the cluster grows back
// with two adds; recover --snapshot then restores an older state with a
// new cluster ID.
func TestRecoverFromSurvivorThenSnapshot(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "dr", 4*time.Minute)
	names := e.grow(ctx, 2)
	e.put(ctx, "/before-loss", "kept")
	snaps, err := workflows.ListSnapshots(e.c.Settings.StateDir, e.name)
	if err != nil || len(snaps) == 0 {
		t.Fatalf("snapshots: %v %v", snaps, err)
	}
	oldID := e.clusterID(ctx)
	survivor := local.MasterName(e.name)
	for _, n := range names[1:] {
		e.kill(n)
	}
	d := e.deps(nil)
	// Quorum lost: every ordinary command fails.
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := e.add(qctx, "dr-master-x", nil); err == nil {
		t.Fatal("add-replica succeeded without quorum")
	}
	qcancel()
	start := time.Now()
	if err := workflows.ExecuteRecover(ctx, d, workflows.Recover(d, workflows.RecoverParams{From: survivor}), workflows.Options{}); err != nil {
		t.Fatalf("recover --from %s: %v", survivor, err)
	}
	t.Logf("recover --from took %s", time.Since(start).Round(time.Millisecond))
	if got := e.get(ctx, "/before-loss"); got != "kept" {
		t.Fatalf("key written before the loss: %q", got)
	}
	if id := e.clusterID(ctx); id != oldID {
		t.Errorf("force-new-cluster changed the cluster ID %x → %x", oldID, id)
	}
	e.assertConverged(ctx, survivor)
	for _, n := range []string{"dr-master-c01", "dr-master-c02"} {
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("grow back %s: %v", n, err)
		}
	}
	e.assertConverged(ctx, survivor, "dr-master-c01", "dr-master-c02")
	if got := e.get(ctx, "/before-loss"); got != "kept" {
		t.Fatalf("key after growing back: %q", got)
	}

	// Snapshot restore (with --force: quorum is fine now) onto one replica.
	snap := snaps[0].Path
	e.put(ctx, "/after-snapshot", "gone after restore")
	err = workflows.ExecuteRecover(ctx, d, workflows.Recover(d, workflows.RecoverParams{From: survivor, Snapshot: snap}), workflows.Options{})
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("recover with a quorum and no --force: %v; want refused", err)
	}
	if err := workflows.ExecuteRecover(ctx, d, workflows.Recover(d, workflows.RecoverParams{From: survivor, Snapshot: snap, Force: true}), workflows.Options{}); err != nil {
		t.Fatalf("recover --snapshot: %v", err)
	}
	e.assertConverged(ctx, survivor)
	if got := e.get(ctx, "/after-snapshot"); got != "" {
		t.Errorf("key written after the snapshot survived its restore: %q", got)
	}
	if id := e.clusterID(ctx); id == oldID {
		t.Errorf("snapshot restore kept the cluster ID %x", id)
	}
}
