//go:build fidelity

// The crash-resume matrix, run by .ci/run after 'make test' (-tags
// fidelity): the pairs whose steps change the cloud every time, the others
// a shard at a time (workflowstest.Select; HAMASTER_CRASH_SEED=all runs
// them all).

package aws_test

import (
	"context"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestCrashResume kills the first add-replica and the leader's
// remove-replica right after their steps, re-runs them, and checks that
// the cluster converges with nothing orphaned.
func TestCrashResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "crash", awstest.KubeUpOptions{})
	// A hang guard: the whole matrix takes ~3 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	workflowstest.CloudCrashMatrix(e.c.Master, func() *workflows.Deps { return e.deps(nil) }, e.add, e.remove, e.assertConverged).Run(ctx, t)
}
