package gce_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

const dnsName = "api.example.test."

// env is one cluster on a fake plus what the workflows need.
type env struct {
	t  *testing.T
	c  *gcetest.Cluster
	wf *workflowstest.Runner
}

// stepTimeout bounds each of a workflow's waits in these tests: a hang
// guard (a replica is healthy in seconds on a quiet machine; one minute
// ran out at load 24), not a speed.
const stepTimeout = 5 * time.Minute

func newEnv(t *testing.T, name string, o gcetest.Options) *env {
	c := gcetest.Up(t, name, o)
	return &env{t: t, c: c, wf: workflowstest.NewRunner(c.Provider, c.Name, c.Settings.StateDir)}
}

func (e *env) deps(after func(string) error) *workflows.Deps { return e.wf.Deps(after) }

func (e *env) add(ctx context.Context, name string, after func(string) error) error {
	return e.wf.Add(ctx, workflows.AddParams{Name: name, Timeout: stepTimeout, DNSKind: "clouddns", DNSName: dnsName}, after)
}

func (e *env) remove(ctx context.Context, name string, after func(string) error) error {
	return e.wf.Remove(ctx, workflows.RemoveParams{Name: name, Timeout: stepTimeout, DrainGrace: 200 * time.Millisecond}, after)
}

// assertConverged checks replicas, etcd members, LB targets, the DNS
// record, and that the fake holds exactly the resources and processes of
// want: nothing leaked.
func (e *env) assertConverged(ctx context.Context, want ...string) {
	e.t.Helper()
	sort.Strings(want)
	// A master's external address routes again a moment after its access
	// config changed (the static IP back from the LB), on GCE as in the
	// fake: Settled reads status until it is healthy.
	rep := workflowstest.Settled(ctx, e.t, e.deps(nil))
	workflowstest.AssertReplicasAndMembersNamed(e.t, rep, want, kubeenv.MemberName)
	f := e.c.Fake
	lbParts := [][2]string{{"forwardingRules", ""}, {"backendServices", ""}, {"healthChecks", ""}, {"instanceGroups", ""}, {"firewalls", ""}}
	switch {
	case len(want) == 1:
		if rep.LB != nil {
			e.t.Errorf("one replica but a load balancer exists: %+v", rep.LB)
		}
		if rep.StaticIPHolder != want[0] {
			e.t.Errorf("static IP attached to %q, want %s", rep.StaticIPHolder, want[0])
		}
		for _, part := range lbParts {
			got := f.Names(part[0])
			if part[0] == "firewalls" {
				// kube-up's own rules stay (util.sh create-master: MASTER_NAME-https, MASTER_NAME-etcd).
				got = slices.DeleteFunc(got, func(n string) bool { return n == e.c.Master+"-https" || n == e.c.Master+"-etcd" })
			}
			if len(got) != 0 {
				e.t.Errorf("LB demoted but %s %v left", part[0], got)
			}
		}
	default:
		workflowstest.AssertLBTargets(e.t, rep, want)
		e.assertLBResources()
	}
	var disks, addrs []string
	for _, n := range want {
		disks = append(disks, n, n+"-pd")
		// kube-up reserves no internal address for master 0; hamaster
		// does when it recreates it, to keep its address.
		if n != e.c.Master || slices.Contains(f.Names("addresses"), n+"-internal") {
			addrs = append(addrs, n+"-internal")
		}
	}
	addrs = append(addrs, e.c.Master+"-ip")
	sort.Strings(disks)
	sort.Strings(addrs)
	if got := f.Names("instances"); !slices.Equal(got, want) {
		e.t.Errorf("fake instances %v, want %v", got, want)
	}
	if got := f.Names("disks"); !slices.Equal(got, disks) {
		e.t.Errorf("fake disks %v, want %v", got, disks)
	}
	if got := f.Names("addresses"); !slices.Equal(got, addrs) {
		e.t.Errorf("fake addresses %v, want %v", got, addrs)
	}
	if nodes, lbs := f.RunningProcesses(); nodes != len(want) || (lbs == 1) != (len(want) > 1) {
		e.t.Errorf("data plane: %d nodes, %d LB processes; want %d nodes", nodes, lbs, len(want))
	}
	if ep, _ := workflows.LoadEndpoint(e.c.Settings.StateDir, e.c.Name); ep.DNSName == "" {
		// No add with a DNS name has run.
	} else if got := f.Records("example-zone", dnsName, "A"); len(got) != 1 || got[0] != e.c.StaticIP {
		e.t.Errorf("DNS %s A = %v, want [%s]", dnsName, got, e.c.StaticIP)
	}
	if j, _ := workflows.NewJournalStore(e.c.Settings.StateDir, e.c.Name).Load(); j != nil && !j.Finished {
		e.t.Errorf("journal unfinished: %s at %+v", j.Workflow, j.Steps)
	}
}

// prober reads /readyz through the static IP in a loop.
// startProber probes /readyz through the static IP.
func startProber(e *env) *workflowstest.Prober {
	return workflowstest.StartProber(e.c.HTTP(), fmt.Sprintf("https://%s:%d/readyz", e.c.StaticIP, e.c.Provider.APIServerPort()))
}

// opWindow is the wall time during which at least one operation of the
// fake was in flight (the union of their intervals): the critical path
// of a workflow that waits on each operation in turn.
func opWindow(stats []gcefake.OpStat) (union, sum time.Duration) {
	sort.Slice(stats, func(i, j int) bool { return stats[i].Start.Before(stats[j].Start) })
	var end time.Time
	for _, s := range stats {
		sum += s.End.Sub(s.Start)
		switch {
		case s.Start.After(end):
			union += s.End.Sub(s.Start)
			end = s.End
		case s.End.After(end):
			union += s.End.Sub(end)
			end = s.End
		}
	}
	return union, sum
}

func total(calls map[string]int) int {
	n := 0
	for _, v := range calls {
		n += v
	}
	return n
}

func callSummary(calls map[string]int) string {
	var keys []string
	for k := range calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", strings.TrimPrefix(k, "compute."), calls[k])
	}
	return b.String()
}

// growShrink runs add 1→3 and remove 3→1 and reports calls and timings.
func growShrink(t *testing.T, e *env) {
	// A hang guard (a quiet run takes about a minute; 4 minutes ran out
	// at load 24), not a speed: the package's -timeout is 15 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	master := e.c.Master
	names := []string{e.c.Name + "-master-a01", e.c.Name + "-master-a02"}
	pr := startProber(e)
	var failedAt []int64
	for i, n := range names {
		e.c.Fake.ResetStats()
		start := time.Now()
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
		wall := time.Since(start)
		calls := e.c.Fake.Calls()
		union, sum := opWindow(e.c.Fake.OpStats())
		t.Logf("add-replica #%d (%s): %d API calls, wall %v, operations in flight %v (sum %v), wall/critical-path %.2f;%s",
			i+1, n, total(calls), wall.Round(time.Millisecond), union.Round(time.Millisecond), sum.Round(time.Millisecond), float64(wall)/float64(union), callSummary(calls))
		failedAt = append(failedAt, pr.Failed.Load())
	}
	e.assertConverged(ctx, append([]string{master}, names...)...)
	for i := len(names) - 1; i >= 0; i-- {
		e.c.Fake.ResetStats()
		start := time.Now()
		if err := e.remove(ctx, names[i], nil); err != nil {
			t.Fatalf("remove %s: %v", names[i], err)
		}
		wall := time.Since(start)
		calls := e.c.Fake.Calls()
		union, _ := opWindow(e.c.Fake.OpStats())
		t.Logf("remove-replica (%s): %d API calls, wall %v, operations in flight %v;%s", names[i], total(calls), wall.Round(time.Millisecond), union.Round(time.Millisecond), callSummary(calls))
		failedAt = append(failedAt, pr.Failed.Load())
	}
	pr.Finish()
	e.assertConverged(ctx, master)
	t.Logf("readyz through the static IP: %d ok, %d failed (cumulative failures after each command: %v)", pr.OK.Load(), pr.Failed.Load(), failedAt)
	// Only promotion (first add) and demotion (last remove) may drop requests.
	if failedAt[1] != failedAt[0] || failedAt[2] != failedAt[1] {
		t.Errorf("client failures outside promotion/demotion: %v", failedAt)
	}
}

// TestGrowAndShrinkUnderFaults fails every distinct call once, with 429
// rateLimitExceeded or 503 backendError in turn.
func TestGrowAndShrinkUnderFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "faults", gcetest.Options{})
	var n atomic.Int64
	e.c.Fake.SetFaults(func(c gcefake.Call) *gcefake.Fault {
		if c.Attempt != 1 {
			return nil
		}
		if n.Add(1)%2 == 0 {
			return &gcefake.Fault{Code: 503}
		}
		return &gcefake.Fault{Code: 429, Reason: "rateLimitExceeded"}
	})
	growShrink(t, e)
	if n.Load() == 0 {
		t.Fatal("no fault was injected")
	}
	t.Logf("%d faults injected", n.Load())
}

// assertLBResources checks the LB as the REST API shows it: kube-up's
// names (util.sh create-loadbalancer: forwarding rule MASTER_NAME on 443
// with the static IP) and the firewall rule that lets the health-check
// probe ranges reach the masters' tag on 443.
func (e *env) assertLBResources() {
	e.t.Helper()
	f, master := e.c.Fake, e.c.Master
	fr := f.Resource("forwardingRules", master)
	if fr == nil {
		e.t.Fatalf("no forwarding rule %s", master)
	}
	if ip, ports := fr["IPAddress"], fmt.Sprint(fr["ports"]); ip != e.c.StaticIP || ports != "[443]" {
		e.t.Errorf("forwarding rule %s: IP %v ports %v, want %s [443]", master, ip, ports, e.c.StaticIP)
	}
	fw := f.Resource("firewalls", master+"-lb-health-checks")
	if fw == nil {
		e.t.Fatalf("no firewall rule %s-lb-health-checks (firewalls: %v)", master, f.Names("firewalls"))
	}
	ranges := fmt.Sprint(fw["sourceRanges"])
	for _, want := range gcefake.HealthCheckRanges {
		if !strings.Contains(ranges, want) {
			e.t.Errorf("firewall rule source ranges %s lack %s", ranges, want)
		}
	}
	if got := fmt.Sprint(fw["allowed"], fw["targetTags"]); got != "[map[IPProtocol:tcp ports:[443]]] ["+master+"]" {
		e.t.Errorf("firewall rule allows %s, want tcp:443 to tag %s", got, master)
	}
}
