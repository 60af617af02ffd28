package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/etcdmember/etcdtest"
	"github.com/hamaster/hamaster/internal/procid"
)

func TestClusterLock(t *testing.T) {
	t.Parallel()
	ctx, _, cli := lockEtcd(t)

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

// TestClusterLockBrokenOnlyWhenLeaseExpires: a holder whose PID is dead on
// this host but whose lease is renewed (a live process in another PID
// namespace) is not broken; a holder whose lease is not renewed (dead or
// paused, even with a live PID) is taken over once the lease expired.
func TestClusterLockBrokenOnlyWhenLeaseExpires(t *testing.T) {
	t.Parallel()
	ctx, _, cli := lockEtcd(t)
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	plant := func(cluster string, pid int, ttl int64, keepAlive bool) {
		t.Helper()
		plantHolder(ctx, t, cli, cluster, Holder{Host: host, PID: pid}, ttl, keepAlive)
	}
	// Live lease, dead-looking PID: refused, not broken.
	plant("live", dead.Process.Pid, 3, true)
	if _, err := AcquireLock(ctx, cli.Raw(), "live", "add-replica"); !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("lock with a renewed lease: %v; want refused naming the holder", err)
	}
	// Lease not renewed, live PID (ours): taken once it expired.
	plant("stale", os.Getpid(), 2, false)
	start := time.Now()
	l, err := AcquireLock(ctx, cli.Raw(), "stale", "add-replica")
	if err != nil {
		t.Fatalf("lock whose lease expired not taken: %v", err)
	}
	t.Logf("expired lock taken after %s", time.Since(start).Round(time.Millisecond))
	l.Release(ctx)
}

// TestClusterLockTakenAtOnceFromAnEndedHolder: a holder that ran on this
// machine's boot and PID namespace and whose process has ended (its PID
// free, or reused by another process) cannot renew its lease: the lock
// is taken at once, long before its lease's TTL. A live holder of this
// machine is refused, and a holder of another machine whose PID looks
// dead here is not broken before its lease expires.
func TestClusterLockTakenAtOnceFromAnEndedHolder(t *testing.T) {
	t.Parallel()
	me := procid.Self()
	if me.Boot == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no /proc/sys/kernel/random/boot_id: CI runs on Linux, where procid proves a holder gone")
		}
		t.Skip("no /proc: no process can be proven gone here")
	}
	ctx, _, cli := lockEtcd(t)
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	// A lease not renewed has 60 s; a renewed one 3 s (renewed every
	// second, so the refusal is quick).
	plant := func(cluster string, h Holder, keepAlive bool) clientv3.LeaseID {
		t.Helper()
		if keepAlive {
			return plantHolder(ctx, t, cli, cluster, h, 3, true)
		}
		return plantHolder(ctx, t, cli, cluster, h, 60, false)
	}
	for _, tc := range []struct {
		name   string
		holder Holder
	}{
		{"its PID free", Holder{Boot: me.Boot, PIDNS: me.PIDNS, PID: ended.Process.Pid, Start: me.Start}},
		{"its PID another process's", Holder{Boot: me.Boot, PIDNS: me.PIDNS, PID: me.PID, Start: me.Start + 1}},
	} {
		planted := plant("ended", tc.holder, false)
		start := time.Now()
		l, err := AcquireLock(ctx, cli.Raw(), "ended", "add-replica")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: lock taken after %s", tc.name, time.Since(start).Round(time.Millisecond))
		// Taken at once: the ended holder's lease (60 s, longer than
		// this test's context) was revoked, not waited out.
		if ttl, err := cli.Raw().TimeToLive(ctx, planted); err != nil || ttl.TTL != -1 {
			t.Errorf("%s: the ended holder's lease after the lock was taken: %+v, %v; want it revoked (TTL -1)", tc.name, ttl, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// This process, renewing: refused.
	plant("alive", Holder{Boot: me.Boot, PIDNS: me.PIDNS, PID: me.PID, Start: me.Start}, true)
	if _, err := AcquireLock(ctx, cli.Raw(), "alive", "add-replica"); !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("a live holder on this machine: %v; want refused naming it", err)
	}
	// Another machine's holder, its PID free here: not broken on that.
	plant("elsewhere", Holder{Boot: "00000000-0000-0000-0000-000000000000", PIDNS: me.PIDNS, PID: ended.Process.Pid, Start: 1}, false)
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	if l, err := AcquireLock(sctx, cli.Raw(), "elsewhere", "add-replica"); err == nil {
		l.Release(ctx)
		t.Fatal("another machine's holder was broken before its lease expired")
	}
}

// TestFencingPausedHolderChangesNothing: the holder's lease expires while
// it is paused (modelled by revoking it, which is what expiry does to
// etcd's state), a second operator takes the lock, and the first run's
// next step never runs.
func TestFencingPausedHolderChangesNothing(t *testing.T) {
	t.Parallel()
	ctx, ec, op1 := lockEtcd(t)
	op2 := ec.Client(ctx, t)

	lock1, err := AcquireLock(ctx, op1.Raw(), "fence", "rolling-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	var lock2 *Lock
	ran := []string{}
	wf := &Workflow{Name: "fence-test", Params: map[string]string{}, Steps: []Step{
		{Name: "one", Run: func(ctx context.Context, r *Run) error {
			ran = append(ran, "one")
			// Paused past the lease: the lease is gone when it wakes...
			if _, err := op2.Raw().Revoke(ctx, lock1.session.Lease()); err != nil {
				return err
			}
			// ...and another operator holds the lock by then.
			l, err := AcquireLock(ctx, op2.Raw(), "fence", "remove-replica")
			lock2 = l
			return err
		}},
		{Name: "two", Run: func(ctx context.Context, r *Run) error {
			ran = append(ran, "two")
			_, err := op1.Raw().Put(ctx, "/changed-by-op1", "x")
			return err
		}},
	}}
	rn := &Runner{Store: &JournalStore{Path: t.TempDir() + "/journal.json"}, Sink: Discard{}, Fence: lock1.Check}
	j, _, err := rn.Prepare(wf, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = rn.Execute(ctx, wf, j)
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, errkind.FailedPrecondition) {
		t.Fatalf("run after losing the lock: %v; want ErrLockLost", err)
	}
	if len(ran) != 1 {
		t.Fatalf("steps run: %v; step two ran without the lock", ran)
	}
	if resp, err := op2.Raw().Get(ctx, "/changed-by-op1"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("op1 changed etcd after losing the lock: %v %v", resp, err)
	}
	if err := lock2.Check(ctx); err != nil {
		t.Fatalf("op2 does not hold the lock: %v", err)
	}
	lock2.Release(ctx)
}

// TestLockCheckSeesAKeyRebound: the fencing transaction, not only the
// session's Done channel, catches a lock key that another lease now owns.
func TestLockCheckSeesAKeyRebound(t *testing.T) {
	t.Parallel()
	ctx, _, cli := lockEtcd(t)
	l, err := AcquireLock(ctx, cli.Raw(), "rebound", "add-replica")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := l.Check(ctx); err != nil {
		t.Fatalf("held lock: %v", err)
	}
	other, err := cli.Raw().Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Raw().Put(ctx, LockKey("rebound"), "{}", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("check with the key on another lease: %v; want ErrLockLost", err)
	}
}

func TestLeaseNotFound(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrLeaseNotFound, true},
		{fmt.Errorf("cluster lock /hamaster/locks/cli: %w", rpctypes.ErrLeaseNotFound), true},
		{errors.New("cluster lock /hamaster/locks/cli: etcdserver: requested lease not found"), true},
		{rpctypes.ErrLeaseExist, false},
		{context.DeadlineExceeded, false},
	} {
		if got := leaseNotFound(tt.err); got != tt.want {
			t.Errorf("leaseNotFound(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestConnectionLost classifies what a lock proof retries: a connection
// that closed or could not be made, never a TLS refusal or an answer.
func TestConnectionLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"goaway", status.Error(codes.Unavailable, `closing transport due to: connection error: desc = "error reading from server: EOF", received prior goaway: code: NO_ERROR`), true},
		{"refused", status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused\""), true},
		{"etcd stopping", rpctypes.ErrGRPCStopped, true},
		{"untrusted server", status.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate\""), false},
		{"client cert rejected", status.Error(codes.Unavailable, "connection error: desc = \"remote error: tls: bad certificate\""), false},
		{"deadline", context.DeadlineExceeded, false},
		{"permission", status.Error(codes.PermissionDenied, "no"), false},
	} {
		if got := connectionLost(tc.err); got != tc.want {
			t.Errorf("%s: connectionLost(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// lockEtcd starts a one-member etcd for a lock test and returns a
// context bounded to 30 s, the cluster and a client of it.
func lockEtcd(t *testing.T) (context.Context, *etcdtest.Cluster, *etcdmember.Client) {
	t.Helper()
	ec := etcdtest.Start(t, 1, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, ec, ec.Client(ctx, t)
}

// plantHolder writes h as cluster's lock holder, a "ghost" running
// add-replica since now, on a lease of ttl seconds, renewed until the
// test ends when keepAlive; it returns the lease.
func plantHolder(ctx context.Context, t *testing.T, cli *etcdmember.Client, cluster string, h Holder, ttl int64, keepAlive bool) clientv3.LeaseID {
	t.Helper()
	lease, err := cli.Raw().Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if keepAlive {
		kctx, kcancel := context.WithCancel(ctx)
		t.Cleanup(kcancel)
		if _, err := cli.Raw().KeepAlive(kctx, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	h.Who, h.Command, h.Since, h.Lease = "ghost", "add-replica", time.Now(), int64(lease.ID)
	val, _ := json.Marshal(h)
	if _, err := cli.Raw().Put(ctx, LockKey(cluster), string(val), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return lease.ID
}
