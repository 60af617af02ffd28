//go:build fidelity

// The local crash-resume matrix (every add and remove step crashed once)
// runs in .ci/run (-tags fidelity), as the GCE and AWS ones do: it was
// make test's longest test.

package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestCrashResumeMatrix kills each workflow right after each of its steps
// and re-runs it: the result must equal an uninterrupted run's.
func TestCrashResumeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	master := local.MasterName("crash")
	d := e.deps(nil)
	addSteps := workflowstest.StepNames(workflows.AddReplica(d, workflows.AddParams{}))
	removeSteps := workflowstest.StepNames(workflows.RemoveReplica(d, workflows.RemoveParams{}))
	n := max(len(addSteps), len(removeSteps))
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("crash-master-%03x", i)
		as := addSteps[i%len(addSteps)]
		rs := removeSteps[i%len(removeSteps)]
		if err := e.add(ctx, name, workflowstest.CrashAfter(as)); !errors.Is(err, workflowstest.ErrCrash) {
			t.Fatalf("add %s crashing after %s: %v", name, as, err)
		}
		// The re-run does not repeat the name: it comes from the journal.
		if err := e.add(ctx, "", nil); err != nil {
			t.Fatalf("resume add after crash at %s: %v", as, err)
		}
		e.assertConverged(ctx, master, name)
		if err := e.remove(ctx, name, workflowstest.CrashAfter(rs)); !errors.Is(err, workflowstest.ErrCrash) {
			t.Fatalf("remove %s crashing after %s: %v", name, rs, err)
		}
		if err := e.remove(ctx, name, nil); err != nil {
			t.Fatalf("resume remove after crash at %s: %v", rs, err)
		}
		e.assertConverged(ctx, master)
		t.Logf("crash after add step %-24s and remove step %-24s: converged", as, rs)
	}
	// A crash mid-add, then removing the half-added replica instead.
	for _, as := range []string{workflows.StepReserveAddress, workflows.StepAddMember, workflows.StepCreateVM, workflows.StepPromoteLB} {
		name := "crash-master-ab" + fmt.Sprint(len(as)%10)
		if err := e.add(ctx, name, workflowstest.CrashAfter(as)); !errors.Is(err, workflowstest.ErrCrash) {
			t.Fatalf("add %s crashing after %s: %v", name, as, err)
		}
		if err := e.remove(ctx, name, nil); err != nil {
			t.Fatalf("remove half-added %s (crashed after %s): %v", name, as, err)
		}
		e.assertConverged(ctx, master)
		t.Logf("half-added replica (crash after %s) removed: converged", as)
	}
}
