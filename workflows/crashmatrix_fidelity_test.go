//go:build fidelity

// The local crash-resume matrix runs in .ci/run (-tags fidelity), as the
// GCE and AWS ones do: it was make test's longest test.

package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestCrashResumeMatrix kills the first add and the leader's removal right
// after each of their steps and re-runs them: the result must equal an
// uninterrupted run's. On the local provider every pair runs every time
// (workflowstest.CrashMatrix: Always nil): the steps are hamaster's own,
// and the GCE and AWS matrices take their non-cloud pairs in turn.
func TestCrashResumeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash")
	// A hang guard: the matrix takes ~2 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	workflowstest.CrashMatrix{
		Master:    local.MasterName("crash"),
		Deps:      func() *workflows.Deps { return e.deps(nil) },
		Add:       e.add,
		Remove:    e.remove,
		Converged: e.assertConverged,
		HalfAdded: []string{workflows.StepReserveAddress, workflows.StepAddMember, workflows.StepCreateVM, workflows.StepPromoteLB},
	}.Run(ctx, t)
}
