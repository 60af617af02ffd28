package workflows

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/etcdmember/etcdtest"
)

// TestOutageFence: the fence of a run replacing a cluster's only replica
// lets it go on while etcd cannot be reached; once etcd answers, it keeps
// the lock's own lease alive with a new session, takes a free lock again,
// and stops the run when another run holds the lock.
func TestOutageFence(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 1, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dialOK := func(ctx context.Context) (*clientv3.Client, func() error, error) {
		c, err := etcdmember.New(ctx, ec.ClientConfig())
		if err != nil {
			return nil, nil, err
		}
		return c.Raw(), c.Close, nil
	}
	down := func(context.Context) (*clientv3.Client, func() error, error) {
		return nil, nil, errors.New("dial: connection refused (the only replica is being replaced)")
	}
	// ended returns a lock whose session has ended, as one does when its
	// keepalives cannot reach etcd for a TTL; its key stays bound to its
	// lease until the lease expires.
	ended := func(t *testing.T, cluster string) *Lock {
		t.Helper()
		cli, err := etcdmember.New(ctx, ec.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		l, err := AcquireLock(ctx, cli.Raw(), cluster, "rolling-upgrade")
		if err != nil {
			t.Fatal(err)
		}
		l.session.Orphan()
		<-l.Done()
		return l
	}
	// leaseGone returns an ended lock whose lease is gone too (revoked,
	// as when it expires): its key with it.
	leaseGone := func(t *testing.T, cluster string) *Lock {
		t.Helper()
		l := ended(t, cluster)
		if _, err := l.session.Client().Revoke(ctx, l.session.Lease()); err != nil {
			t.Fatal(err)
		}
		return l
	}
	fence := func(l *Lock, cluster string, dial func(context.Context) (*clientv3.Client, func() error, error)) *outageFence {
		return &outageFence{lock: l, cluster: cluster, holder: "rolling-upgrade", dial: dial, log: slog.New(slog.DiscardHandler), probe: 5 * time.Second}
	}

	t.Run("etcd down: the run goes on", func(t *testing.T) {
		l := ended(t, "down")
		if err := fence(l, "down", down).Check(ctx); err != nil {
			t.Fatalf("fence while etcd cannot be reached: %v; want the run to go on", err)
		}
	})
	t.Run("etcd back, lease alive: kept by a new session", func(t *testing.T) {
		l := ended(t, "back")
		lease := l.session.Lease()
		if err := fence(l, "back", dialOK).Check(ctx); err != nil {
			t.Fatalf("fence once etcd answers: %v", err)
		}
		if l.session.Lease() != lease {
			t.Errorf("lease %x, want the run's own %x kept", l.session.Lease(), lease)
		}
		if err := l.Check(ctx); err != nil {
			t.Fatalf("the lock after the outage: %v", err)
		}
		select {
		case <-l.Done():
			t.Fatal("the new session ended at once")
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("lease gone, lock free: taken again", func(t *testing.T) {
		l := leaseGone(t, "free")
		if err := fence(l, "free", dialOK).Check(ctx); err != nil {
			t.Fatalf("fence with the lock free again: %v", err)
		}
		if err := l.Check(ctx); err != nil {
			t.Fatalf("the lock taken again: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("another run holds it: stopped", func(t *testing.T) {
		l := leaseGone(t, "taken")
		cli, err := etcdmember.New(ctx, ec.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		other, err := AcquireLock(ctx, cli.Raw(), "taken", "add-replica")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(ctx)
		if err := fence(l, "taken", dialOK).Check(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("fence with another run holding the lock: %v; want ErrLockLost", err)
		}
	})
}
