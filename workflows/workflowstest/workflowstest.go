// Package workflowstest holds checks shared by the workflows' end-to-end
// tests on every provider.
package workflowstest

import (
	"errors"
	"slices"
	"sort"
	"testing"

	"github.com/hamaster/hamaster/workflows"
)

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
