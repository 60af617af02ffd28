//go:build fidelity

// The crash-resume matrix over every step pair, run by .ci/run after
// 'make test' (with HAMASTER_AWS_FULL_CRASH_MATRIX=1; without it, the
// steps that change the cloud): 'make test' stays under 10 minutes on 2
// cores from a fresh machine, and the local provider's matrix
// (workflows.TestCrashResumeMatrix) stays in it.

package aws_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestCrashResume kills add-replica right after each of its steps (and
// remove-replica after each of its), re-runs it, and checks that the
// cluster converges with nothing orphaned.
func TestCrashResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash", awstest.KubeUpOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	d := e.deps(nil)
	addSteps := workflowstest.StepNames(workflows.AddReplica(d, workflows.AddParams{}))
	removeSteps := workflowstest.StepNames(workflows.RemoveReplica(d, workflows.RemoveParams{}))
	// By default the steps that touch AWS; HAMASTER_AWS_FULL_CRASH_MATRIX=1
	// crashes after every step of both workflows (12 cycles, ~3 min).
	type pair struct{ add, remove string }
	pairs := []pair{
		{workflows.StepCreateVM, "delete-vm"},
		{workflows.StepPromoteLB, "demote-lb-to-static-ip"},
		{workflows.StepAddToLB, workflows.StepRemoveFromLB},
		{workflows.StepDNS, workflows.StepDNS},
	}
	if os.Getenv("HAMASTER_AWS_FULL_CRASH_MATRIX") != "" {
		pairs = nil
		for i := 0; i < max(len(addSteps), len(removeSteps)); i++ {
			pairs = append(pairs, pair{addSteps[i%len(addSteps)], removeSteps[i%len(removeSteps)]})
		}
	}
	for i, pr := range pairs {
		if !slices.Contains(addSteps, pr.add) || !slices.Contains(removeSteps, pr.remove) {
			t.Fatalf("unknown step in %+v (add %v, remove %v)", pr, addSteps, removeSteps)
		}
		name := fmt.Sprintf("crash-master-%03x", i)
		as, rs := pr.add, pr.remove
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
}
