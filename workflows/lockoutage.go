package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/hamaster/hamaster/errkind"
)

// outageFence fences the steps of a run that recreates a cluster's only
// replica (rolling-upgrade --allow-downtime on one master). Its lock lives
// in that replica's etcd, so while the replica is replaced there is no
// etcd to prove the lock with: the session's keepalives fail, its lease
// looks lost, and Lock.Check cannot answer. A plain fence would stop the
// run there — before the rollback that would bring a replica that does not
// come back (a version that cannot boot) back to its last known-good
// template, leaving no etcd and so no command that can take the lock to
// finish the job.
//
// While the cluster's etcd cannot be reached at all, no other run can take
// the lock either, so the fence lets the run go on (and says so). Once
// etcd answers again, the lock must be proven as ever: the key still bound
// to this run's lease (etcd keeps leases across a restart and renews
// their TTL when a leader is elected) is kept alive by a new session on a
// new client; a key gone with its lease is taken again if it is free; a key
// another run holds stops this one (ErrLockLost).
type outageFence struct {
	lock    *Lock
	cluster string
	holder  string
	// dial connects a new client to the cluster's etcd (the one the lock
	// started with may point at the replica that was replaced); closing
	// it is the func it returns.
	dial func(ctx context.Context) (*clientv3.Client, func() error, error)
	log  *slog.Logger
	// probe bounds how long the fence tries to reach etcd.
	probe time.Duration
}

// Check is the Runner's fence.
func (f *outageFence) Check(ctx context.Context) error {
	// Bounded: a client whose only member is gone waits for it.
	cctx, cancelCheck := context.WithTimeout(ctx, f.probe)
	err := f.lock.Check(cctx)
	cancelCheck()
	if err == nil {
		return nil
	}
	select {
	case <-f.lock.Done():
	default:
		if !errors.Is(err, errkind.Unavailable) {
			return err // etcd answered: the key is bound to another lease
		}
	}
	pctx, cancel := context.WithTimeout(ctx, f.probe)
	defer cancel()
	cli, closeCli, derr := f.dial(pctx)
	if derr == nil {
		if _, derr = cli.Get(pctx, f.lock.key); derr != nil {
			_ = closeCli()
		}
	}
	if derr != nil {
		f.log.Warn("cluster lock cannot be proven: the cluster's etcd cannot be reached (its only replica is being replaced); going on, since no other run can take the lock while it is down",
			"lock_error", err, "etcd_error", derr)
		return nil
	}
	if err := f.rebind(ctx, cli, closeCli); err != nil {
		_ = closeCli()
		return err
	}
	f.log.Info("cluster lock proven again after the outage", "key", f.lock.key, "lease", fmt.Sprintf("%x", int64(f.lock.session.Lease())))
	return nil
}

// rebind proves the lock through cli and keeps it alive with a new
// session; on success cli belongs to the lock (closed by Release).
func (f *outageFence) rebind(ctx context.Context, cli *clientv3.Client, closeCli func() error) error {
	lease := f.lock.session.Lease()
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(f.lock.key), "=", lease)).
		Commit()
	if err != nil {
		return errkind.Errorf(errkind.Unavailable, "prove the cluster lock is held after the outage: %w", err)
	}
	if resp.Succeeded {
		s, err := concurrency.NewSession(cli, concurrency.WithLease(lease), concurrency.WithTTL(LockTTL), concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			return errkind.Errorf(errkind.Unavailable, "keep the cluster lock's lease %x alive after the outage: %w", int64(lease), err)
		}
		f.lock.adopt(s, closeCli)
		return nil
	}
	// The lease expired with the key (the outage outlasted it after etcd
	// came back): take the lock again if nobody else did.
	l, err := acquireLock(ctx, cli, f.cluster, f.holder)
	if err != nil {
		if errors.Is(err, errkind.FailedPrecondition) {
			return errkind.Errorf(errkind.FailedPrecondition, "%w: after the outage: %v", ErrLockLost, err)
		}
		return err
	}
	f.lock.adopt(l.session, closeCli)
	return nil
}

// adopt makes s the lock's session (closeCli, closing its client, runs at
// Release); the old session's keepalives ended with the outage.
func (l *Lock) adopt(s *concurrency.Session, closeCli func() error) {
	old := l.session
	l.session = s
	l.closers = append(l.closers, closeCli)
	// Orphan, not Close: Close revokes the lease, which s may be keeping.
	old.Orphan()
}
