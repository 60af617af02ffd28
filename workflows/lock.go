package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/procid"
)

// LockTTL is the lease TTL of the cluster lock: how long a lock outlives an
// operator whose process died on another machine.
const LockTTL = 15

// Holder identifies who holds the cluster lock.
type Holder struct {
	Who     string    `json:"who"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
	Lease   int64     `json:"lease"`
	// Boot, PIDNS and Start name the holder's process so that a later
	// run on the same machine can prove it gone (procid.Gone).
	Boot  string `json:"boot_id,omitempty"`
	PIDNS string `json:"pid_ns,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// process is the holder's procid.ID.
func (h Holder) process() procid.ID {
	return procid.ID{Boot: h.Boot, PIDNS: h.PIDNS, PID: h.PID, Start: h.Start}
}

func (h Holder) String() string {
	return fmt.Sprintf("%s on %s (pid %d) running %q since %s", h.Who, h.Host, h.PID, h.Command, h.Since.Format(time.RFC3339))
}

// Lock is a held cluster lock: a key bound to an etcd lease that a
// concurrency.Session keeps alive. If the holder dies, the lease expires
// after LockTTL seconds and the key goes with it.
type Lock struct {
	session *concurrency.Session
	key     string
	// exclude names replicas the lock's client must not use (a victim).
	exclude []string
	// closers close the clients opened for the lock after an outage
	// (outageFence); Release runs them.
	closers []func() error
}

// LockKey is the etcd key of a cluster's lock.
func LockKey(cluster string) string { return "/hamaster/locks/" + cluster }

// AcquireLock takes the cluster lock or refuses with
// errkind.FailedPrecondition naming the holder. A lock is never broken by
// guessing whether its holder lives (a bare PID says nothing across PID
// namespaces or hosts): AcquireLock watches the holder's lease, refuses as
// soon as the holder renews or releases it, and takes the lock only once
// the lease has expired (a holder that died or is paused; at most LockTTL
// seconds). The one exception is proof: a holder that ran on this
// machine's boot, in this PID namespace, whose process has ended
// (procid.Gone: its PID free, a zombie, or another process's) cannot
// renew its lease; its lease is revoked and the lock taken at once, as
// an operator's re-run after a crash expects.
func AcquireLock(ctx context.Context, cli *clientv3.Client, cluster, command string) (*Lock, error) {
	for try := 1; ; try++ {
		l, err := acquireLock(ctx, cli, cluster, command)
		// Seen under load right after a replica was recreated or an add
		// crashed: the Txn binding the key to the lease just granted fails
		// with "requested lease not found". Nothing was written (the Txn
		// failed as a whole), so a new session and lease is safe to try.
		if err == nil || try == 3 || ctx.Err() != nil || !leaseNotFound(err) {
			return l, err
		}
	}
}

// leaseNotFound reports etcd's ErrLeaseNotFound, however wrapped.
func leaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())
}

func acquireLock(ctx context.Context, cli *clientv3.Client, cluster, command string) (*Lock, error) {
	dropLearners(ctx, cli)
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(LockTTL), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("cluster lock: create etcd lease: %w", err)
	}
	host, _ := os.Hostname()
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	self := procid.Self()
	me := Holder{Who: who, Host: host, PID: self.PID, Command: command, Since: time.Now().UTC(), Lease: int64(session.Lease()),
		Boot: self.Boot, PIDNS: self.PIDNS, Start: self.Start}
	val, err := json.Marshal(me)
	if err != nil {
		session.Close()
		return nil, err
	}
	key := LockKey(cluster)
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(session.Lease()))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			session.Close()
			return nil, fmt.Errorf("cluster lock %s: %w", key, err)
		}
		if resp.Succeeded {
			return &Lock{session: session, key: key}, nil
		}
		var other Holder
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // released between the compare and the get
		}
		_ = json.Unmarshal(kvs[0].Value, &other)
		if procid.Gone(other.process()) {
			// Its lease outlives it by up to LockTTL; nobody can renew it.
			if _, err := cli.Revoke(ctx, clientv3.LeaseID(kvs[0].Lease)); err != nil && !leaseNotFound(err) {
				session.Close()
				return nil, fmt.Errorf("cluster lock %s: revoke the lease of %s, whose process has ended: %w", key, other, err)
			}
			continue
		}
		expired, err := waitLeaseExpiry(ctx, cli, clientv3.LeaseID(kvs[0].Lease))
		if err != nil {
			session.Close()
			return nil, fmt.Errorf("cluster lock %s: watch the holder's lease: %w", key, err)
		}
		if expired {
			// The holder's lease ran out; etcd's lessor deletes its key
			// within a moment: wait for that, then try again.
			if err := waitDeleted(ctx, cli, key); err != nil {
				session.Close()
				return nil, fmt.Errorf("cluster lock %s: %w", key, err)
			}
			continue
		}
		session.Close()
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s is locked by %s; wait for it to finish (a dead holder's lock expires %ds after it stopped)", cluster, other, LockTTL)
	}
	session.Close()
	return nil, errkind.Errorf(errkind.Unavailable, "cluster lock %s: contended, try again", key)
}

// ErrLockLost: the cluster lock's lease expired or the key now belongs to
// someone else; the run must change nothing more.
var ErrLockLost = errors.New("cluster lock lost")

// Done is closed when the lock's session ends (its lease expired or was
// revoked, or keepalives stopped).
func (l *Lock) Done() <-chan struct{} { return l.session.Done() }

// Check proves the lock is still held: the session is alive and an etcd
// transaction finds the lock key bound to this lock's lease (a holder
// paused past its lease finds it gone or owned by another lease). It
// returns an error wrapping ErrLockLost (errkind.FailedPrecondition) when
// not.
func (l *Lock) Check(ctx context.Context) error {
	select {
	case <-l.session.Done():
		return errkind.Errorf(errkind.FailedPrecondition, "%w: its lease %x expired or was revoked", ErrLockLost, int64(l.session.Lease()))
	default:
	}
	l.followVoters(ctx)
	// The proof is a read-only transaction (no operations), so a
	// connection that closed under it is retried, briefly: the member the
	// client was talking to may just have been removed or stopped by this
	// very run (a surge upgrade's remove step; seen as "closing transport
	// ... received prior goaway"), and the client fails over to another
	// voter on the next attempt.
	resp, err := backoff.Retry(ctx, func() (*clientv3.TxnResponse, error) {
		resp, err := l.session.Client().Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(l.key), "=", l.session.Lease())).
			Commit()
		if err != nil && !connectionLost(err) {
			return nil, backoff.Permanent(err)
		}
		return resp, err
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: time.Second}),
		backoff.WithMaxElapsedTime(lockProofRetry))
	if err != nil {
		return errkind.Errorf(errkind.Unavailable, "prove the cluster lock is held: %w", err)
	}
	if !resp.Succeeded {
		return errkind.Errorf(errkind.FailedPrecondition, "%w: %s is no longer bound to lease %x (expired while this run was paused?); another operator may hold it", ErrLockLost, l.key, int64(l.session.Lease()))
	}
	return nil
}

// lockProofRetry bounds the retries of a lock proof whose connection was
// lost: well under LockTTL, so a lock that is really gone is still noticed
// before anything else changes.
const lockProofRetry = 3 * time.Second

// connectionLost reports a gRPC Unavailable that is not a TLS refusal: the
// connection to the member closed or could not be made.
func connectionLost(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		var ee rpctypes.EtcdError
		return errors.As(err, &ee) && ee.Code() == codes.Unavailable
	}
	msg := s.Message()
	return s.Code() == codes.Unavailable && !strings.Contains(msg, "authentication handshake failed") && !strings.Contains(msg, "remote error: tls:")
}

// followVoters points the lock's client at the cluster's current voters
// (but never at an excluded replica): a run that replaces the replica its
// client first connected through (a surge upgrade of a single replica)
// keeps its lease alive through the new one. Best effort, and only for a
// client connected to member URLs directly.
func (l *Lock) followVoters(ctx context.Context) {
	cli := l.session.Client()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return
	}
	// Only a client that talks to members directly (not through SSH
	// tunnels, whose local ports are no member's URL) can follow them.
	all := map[string]bool{}
	for _, m := range resp.Members {
		for _, u := range m.ClientURLs {
			all[u] = true
		}
	}
	for _, ep := range cli.Endpoints() {
		if !all[ep] {
			return
		}
	}
	var urls []string
	for _, m := range resp.Members {
		if m.IsLearner || m.Name == "" || slices.Contains(l.exclude, m.Name) {
			continue
		}
		urls = append(urls, m.ClientURLs...)
	}
	if len(urls) == 0 {
		return
	}
	cur := slices.Clone(cli.Endpoints())
	slices.Sort(cur)
	slices.Sort(urls)
	if !slices.Equal(cur, urls) {
		cli.SetEndpoints(urls...)
	}
}

// dropLearners takes learners' client URLs out of cli's endpoints (best
// effort, and only for a client that talks to members directly). A
// learner refuses lease keepalives ("rpc not supported for learner"): a
// keepalive stream that lands on one renews nothing, and the lease a lock
// is about to use, granted before waiting out a dead holder's, could
// expire meanwhile. An add-replica resumed after a crash has exactly that
// learner running.
func dropLearners(ctx context.Context, cli *clientv3.Client) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return
	}
	learner, member := map[string]bool{}, map[string]bool{}
	for _, m := range resp.Members {
		for _, u := range m.ClientURLs {
			member[u] = true
			learner[u] = m.IsLearner
		}
	}
	var keep []string
	for _, ep := range cli.Endpoints() {
		if !member[ep] {
			return // not member URLs (a tunnel): leave the client alone
		}
		if !learner[ep] {
			keep = append(keep, ep)
		}
	}
	if len(keep) > 0 && len(keep) < len(cli.Endpoints()) {
		cli.SetEndpoints(keep...)
	}
}

// waitLeaseExpiry watches another holder's lease: false as soon as it is
// renewed (a live holder) or revoked with time left (released), true once
// it has expired. It polls the lease's TTL; a live holder renews every
// TTL/3 seconds, so a refusal takes about that long. The TTL is whole
// seconds, and a holder that renews promptly can show the same value at
// every poll: a lease still there its granted TTL (plus 2 s for etcd's
// revocation) after it was first seen was renewed all the same.
func waitLeaseExpiry(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID) (bool, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	prev := int64(-2)
	var outlived time.Time // first seen + granted TTL + 2 s
	for {
		ttl, err := cli.TimeToLive(ctx, lease)
		if err != nil && !strings.Contains(err.Error(), "requested lease not found") {
			return false, err
		}
		cur := int64(-1)
		if err == nil {
			cur = ttl.TTL
		}
		if cur > 0 && outlived.IsZero() {
			outlived = time.Now().Add(time.Duration(ttl.GrantedTTL)*time.Second + 2*time.Second)
		}
		switch {
		case cur <= 0 && prev > 2:
			return false, nil // revoked with time left: released by a live holder
		case cur <= 0:
			return true, nil
		case prev > 0 && cur > prev:
			return false, nil // renewed: the holder lives
		case time.Now().After(outlived):
			return false, nil // renewed between polls: the holder lives
		}
		prev = cur
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
	}
}

// waitDeleted returns once key has no value. It polls (a watch may land
// on a learner, which refuses watches).
func waitDeleted(ctx context.Context, cli *clientv3.Client, key string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := cli.Get(ctx, key)
		if err == nil && len(resp.Kvs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Release deletes the key and revokes the lease. Safe on nil.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	cli := l.session.Client()
	_, err := cli.Delete(ctx, l.key)
	cerr := l.session.Close()
	for _, c := range l.closers {
		_ = c()
	}
	if err != nil {
		return fmt.Errorf("release cluster lock: %w", err)
	}
	return cerr
}

// Abandon stops keeping the lease alive without deleting the key, as a
// crashed process would (test-only: crash-resume tests).
func (l *Lock) Abandon() {
	if l != nil {
		l.session.Orphan()
	}
}

// lockHolder describes what the lock key holds now (for a log line).
func lockHolder(ctx context.Context, cli *clientv3.Client, cluster string) string {
	resp, err := cli.Get(ctx, LockKey(cluster))
	if err != nil {
		return "unknown: " + err.Error()
	}
	if len(resp.Kvs) == 0 {
		return "nobody"
	}
	var h Holder
	_ = json.Unmarshal(resp.Kvs[0].Value, &h)
	return fmt.Sprintf("%s, lease %x", h, resp.Kvs[0].Lease)
}
