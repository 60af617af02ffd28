// Package workflowstest holds checks shared by the workflows' end-to-end
// tests on every provider.
package workflowstest

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/internal/probeload"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/workflows"
)

// Settled reads the cluster's status until the parts the assertions below
// judge are ready (every replica healthy, every etcd member a healthy
// voter, every load balancer target serving), and returns that report;
// after settleGuard (a hang guard) it returns the last report read, for
// the caller's assertions to name what is wrong. A workflow returns once
// its own checks passed, but one status read is a snapshot: on a busy
// machine a member's status or a replica's /readyz may miss its few
// seconds while the cluster is fine, and a master's external address
// routes again only a moment after its access config changed (GCE).
func Settled(ctx context.Context, t testing.TB, d *workflows.Deps) workflows.Report {
	t.Helper()
	guard, cancel := context.WithTimeout(ctx, settleGuard)
	defer cancel()
	var rep workflows.Report
	err := wait.Until(guard, time.Second, "a settled status", func() (bool, error) {
		var err error
		rep, err = workflows.Status(ctx, d)
		if err != nil {
			return false, err
		}
		return settled(rep), nil
	})
	if err != nil && guard.Err() == nil {
		t.Fatalf("status: %v", err)
	}
	return rep
}

// settleGuard bounds Settled: a hang guard, far above the second or two a
// status read takes.
const settleGuard = time.Minute

func settled(rep workflows.Report) bool {
	if rep.MembersError != "" || slices.ContainsFunc(rep.Replicas, func(r workflows.ReplicaStatus) bool { return !r.Healthy }) ||
		slices.ContainsFunc(rep.Members, func(m etcdmember.Member) bool { return m.Learner || !m.Healthy }) {
		return false
	}
	return rep.LB == nil || !slices.ContainsFunc(rep.LB.Targets, func(tg lb.TargetHealth) bool { return !tg.Healthy || tg.Draining })
}

// AssertReplicasAndMembers checks that rep lists exactly want (sorted or
// not) as healthy replicas and as healthy, voting etcd members.
func AssertReplicasAndMembers(t testing.TB, rep workflows.Report, want []string) {
	t.Helper()
	AssertReplicasAndMembersNamed(t, rep, want, func(r string) string { return r })
}

// AssertLBTargets checks that rep shows a load balancer whose targets
// are exactly want (sorted or not), each serving (healthy, not draining).
func AssertLBTargets(t testing.TB, rep workflows.Report, want []string) {
	t.Helper()
	if rep.LB == nil {
		t.Fatalf("%d replicas but no load balancer", len(want))
	}
	var targets []string
	for _, tg := range rep.LB.Targets {
		targets = append(targets, tg.Name)
		if !tg.Healthy || tg.Draining {
			t.Errorf("LB target %+v not serving", tg)
		}
	}
	sort.Strings(targets)
	if want = slices.Sorted(slices.Values(want)); !slices.Equal(targets, want) {
		t.Errorf("LB targets %v, want %v", targets, want)
	}
}

// AssertReplicasAndMembersNamed is AssertReplicasAndMembers for masters
// whose etcd members are named otherwise (kube-up's: etcd-<hostname>).
func AssertReplicasAndMembersNamed(t testing.TB, rep workflows.Report, want []string, member func(replica string) string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var names, members []string
	for _, r := range rep.Replicas {
		names = append(names, r.Name)
		if !r.Healthy {
			t.Errorf("replica %s unhealthy: %s", r.Name, r.Error)
		}
	}
	for _, m := range rep.Members {
		members = append(members, m.Name)
		if m.Learner || !m.Healthy {
			t.Errorf("member %s learner=%v healthy=%v", m.Name, m.Learner, m.Healthy)
		}
	}
	sort.Strings(names)
	sort.Strings(members)
	if !slices.Equal(names, want) {
		t.Errorf("replicas %v, want %v", names, want)
	}
	var wantMembers []string
	for _, r := range want {
		wantMembers = append(wantMembers, member(r))
	}
	sort.Strings(wantMembers)
	if !slices.Equal(members, wantMembers) {
		t.Errorf("etcd members %v, want %v (%s)", members, wantMembers, rep.MembersError)
	}
}

// ErrCrash is what CrashAfter's hook returns: a simulated crash.
var ErrCrash = errors.New("simulated crash")

// CrashAfter is a Deps.AfterStep hook that stops the run with ErrCrash
// right after step is journaled as done, as if the process had died.
func CrashAfter(step string) func(string) error {
	return func(s string) error {
		if s == step {
			return ErrCrash
		}
		return nil
	}
}

// StepNames lists a workflow's step names in order.
func StepNames(wf *workflows.Workflow) []string {
	names := make([]string, 0, len(wf.Steps))
	for _, s := range wf.Steps {
		names = append(names, s.Name)
	}
	return names
}

// Tally counts a client's requests while a workflow changes the
// cluster: OK the answered ones, Failed the rest, each failure kept with
// its time (Failures).
type Tally struct {
	OK, Failed atomic.Int64
	mu         sync.Mutex
	failures   []string
}

// Record counts one request that failed with err, or, when err is nil,
// oks answered ones.
func (c *Tally) Record(err error, oks int64) {
	if err == nil {
		c.OK.Add(oks)
		return
	}
	c.Failed.Add(1)
	c.mu.Lock()
	c.failures = append(c.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
	c.mu.Unlock()
}

// Failures is every failed request so far, with its time.
func (c *Tally) Failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.failures)
}

// Prober GETs a URL every 20 ms until Finish, as a client of the cluster
// would while a workflow changes it, tallying the answers: 200 is OK.
type Prober struct {
	Tally
	stop, done chan struct{}
}

// ProbeHangGuard bounds one probe, whatever client's own Timeout: a
// request through the load balancer answers in milliseconds, so one
// that takes this long hangs (a backend that dropped it mid-way), which
// is a failure; one slowed by a busy machine is not (a 2 s client
// timeout failed an upgrade in .ci/run's race tier).
const ProbeHangGuard = 30 * time.Second

// StartProber starts probing url with client (its Timeout replaced by
// ProbeHangGuard).
func StartProber(client *http.Client, url string) *Prober {
	c := *client
	c.Timeout = ProbeHangGuard
	client = &c
	p := &Prober{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			p.Record(probeload.Get(context.Background(), client, url), 1)
		}
	}()
	return p
}

// Finish stops the probes and waits for the last.
func (p *Prober) Finish() { close(p.stop); <-p.done }
