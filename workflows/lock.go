package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/hamaster/hamaster/errkind"
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
}

// LockKey is the etcd key of a cluster's lock.
func LockKey(cluster string) string { return "/hamaster/locks/" + cluster }

// AcquireLock takes the cluster lock or refuses with
// errkind.FailedPrecondition naming the holder. A lock left by a process of
// this host that no longer runs is broken at once (its lease revoked) rather
// than waited out.
func AcquireLock(ctx context.Context, cli *clientv3.Client, cluster, command string) (*Lock, error) {
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(LockTTL), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("cluster lock: create etcd lease: %w", err)
	}
	host, _ := os.Hostname()
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	me := Holder{Who: who, Host: host, PID: os.Getpid(), Command: command, Since: time.Now().UTC(), Lease: int64(session.Lease())}
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
		if other.Host == host && other.PID > 0 && !processAlive(other.PID) {
			// A crashed run of ours: its lease would expire by itself, but
			// there is no reason to make the operator wait for it.
			if _, err := cli.Revoke(ctx, clientv3.LeaseID(other.Lease)); err != nil && !strings.Contains(err.Error(), "requested lease not found") {
				session.Close()
				return nil, fmt.Errorf("cluster lock: break stale lock of dead pid %d: %w", other.PID, err)
			}
			continue
		}
		session.Close()
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s is locked by %s; wait for it to finish (a dead holder's lock expires %ds after it stopped)", cluster, other, LockTTL)
	}
	session.Close()
	return nil, errkind.Errorf(errkind.Unavailable, "cluster lock %s: contended, try again", key)
}

// Release deletes the key and revokes the lease. Safe on nil.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	cli := l.session.Client()
	_, err := cli.Delete(ctx, l.key)
	cerr := l.session.Close()
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

// processAlive reports whether a process with pid exists on this host.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
