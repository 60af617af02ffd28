//go:build fidelity

// The crash-resume matrix over every step pair, run by .ci/run after
// 'make test' (with HAMASTER_GCE_FULL_CRASH_MATRIX=1; without it, the
// steps that change the cloud): 'make test' stays under 10 minutes on 2
// cores from a fresh machine, and the local provider's matrix
// (workflows.TestCrashResumeMatrix) stays in it.

package gce_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestCrashResumeMatrix crashes add-replica and remove-replica right after
// each step that changes the cloud and re-runs them: the result must be
// an uninterrupted run's, with nothing leaked in the fake.
func TestCrashResumeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// By default the steps that change the cloud; HAMASTER_GCE_FULL_CRASH_MATRIX=1
	// (run by .ci/run after make test) crashes after every step of both.
	addSteps := []string{workflows.StepReserveAddress, workflows.StepCreateVM, workflows.StepPromoteLB, workflows.StepAddToLB, workflows.StepDNS}
	removeSteps := []string{workflows.StepRemoveFromLB, workflows.StepRemoveMember, workflows.StepDeleteVM, workflows.StepDemote, workflows.StepDemote}
	if os.Getenv("HAMASTER_GCE_FULL_CRASH_MATRIX") != "" {
		d := e.deps(nil)
		addSteps, removeSteps = nil, nil
		for _, s := range workflows.AddReplica(d, workflows.AddParams{}).Steps {
			addSteps = append(addSteps, s.Name)
		}
		for _, s := range workflows.RemoveReplica(d, workflows.RemoveParams{}).Steps {
			removeSteps = append(removeSteps, s.Name)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
	}
	for i := 0; i < max(len(addSteps), len(removeSteps)); i++ {
		as, rs := addSteps[i%len(addSteps)], removeSteps[i%len(removeSteps)]
		name := fmt.Sprintf("crash-master-%03x", i)
		if err := e.add(ctx, name, workflowstest.CrashAfter(as)); !errors.Is(err, workflowstest.ErrCrash) {
			t.Fatalf("add %s crashing after %s: %v", name, as, err)
		}
		if err := e.add(ctx, "", nil); err != nil {
			t.Fatalf("resume add after crash at %s: %v", as, err)
		}
		e.assertConverged(ctx, e.c.Master, name)
		if err := e.remove(ctx, name, workflowstest.CrashAfter(rs)); !errors.Is(err, workflowstest.ErrCrash) {
			t.Fatalf("remove %s crashing after %s: %v", name, rs, err)
		}
		if err := e.remove(ctx, name, nil); err != nil {
			t.Fatalf("resume remove after crash at %s: %v", rs, err)
		}
		e.assertConverged(ctx, e.c.Master)
		t.Logf("crash after add step %-24s and remove step %-24s: converged", as, rs)
	}
	// A crash mid-add, then removing the half-added replica instead.
	name := "crash-master-a1f" // kube-up names: MASTER_NAME-<3 characters>
	if err := e.add(ctx, name, workflowstest.CrashAfter(workflows.StepCreateVM)); !errors.Is(err, workflowstest.ErrCrash) {
		t.Fatalf("add %s crashing after %s: %v", name, workflows.StepCreateVM, err)
	}
	if err := e.remove(ctx, name, nil); err != nil {
		t.Fatalf("remove half-added %s: %v", name, err)
	}
	e.assertConverged(ctx, e.c.Master)
}
