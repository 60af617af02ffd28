//go:build fidelity

// The crash-resume matrix, run by .ci/run after 'make test' (-tags
// fidelity): the pairs whose steps change the cloud every time, the others
// a shard at a time (workflowstest.Select; HAMASTER_CRASH_SEED=all runs
// them all).

package gce_test

import (
	"context"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestCrashResumeMatrix crashes the first add-replica and the leader's
// remove-replica right after their steps and re-runs them: the result
// must be an uninterrupted run's, with nothing leaked in the fake.
func TestCrashResumeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash", gcetest.Options{})
	// A hang guard: the whole matrix takes ~3 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	workflowstest.CloudCrashMatrix(e.c.Master, func() *workflows.Deps { return e.deps(nil) }, e.add, e.remove, e.assertConverged).Run(ctx, t)
}
