package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/etcdmember/etcdtest"
)

func TestClusterLock(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 1, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := etcdmember.New(ctx, ec.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	first, err := AcquireLock(ctx, cli.Raw(), "c1", "add-replica")
	if err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	// A second operator is refused and told who holds it.
	_, err = AcquireLock(ctx, cli.Raw(), "c1", "remove-replica")
	if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), `running "add-replica"`) {
		t.Fatalf("second acquire: want refusal naming the holder, got %v", err)
	}
	// Another cluster's lock is independent.
	other, err := AcquireLock(ctx, cli.Raw(), "c2", "status")
	if err != nil {
		t.Fatalf("other cluster: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := AcquireLock(ctx, cli.Raw(), "c1", "remove-replica")
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	again.Release(ctx)
}

func TestClusterLockOfDeadProcessIsBroken(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 1, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := etcdmember.New(ctx, ec.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// Plant a lock held by a process of this host that has exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Raw().Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	val, _ := json.Marshal(Holder{Who: "ghost", Host: host, PID: dead.Process.Pid, Command: "add-replica", Since: time.Now(), Lease: int64(lease.ID)})
	if _, err := cli.Raw().Put(ctx, LockKey("c1"), string(val), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	l, err := AcquireLock(ctx, cli.Raw(), "c1", "add-replica")
	if err != nil {
		t.Fatalf("stale lock of dead pid %d not broken: %v", dead.Process.Pid, err)
	}
	l.Release(ctx)
}
