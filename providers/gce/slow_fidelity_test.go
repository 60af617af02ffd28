//go:build fidelity

// Run by .ci/run's cloud-slow tier after 'make test', which stays under
// 10 minutes on 2 cores: the rolling upgrade and its bad-flag rollback
// wait on recreated VMs' boots and the LB's health checks (~100 s and
// ~40 s; the workflows' own bad-flag test is in make test), and the
// plain grow and shrink (~35 s) is TestGrowAndShrinkUnderFaults's
// without the faults.

package gce_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/workflows"
)

// grow adds n replicas named <cluster>-master-b0N and returns master 0's
// name and theirs.
func (e *env) grow(ctx context.Context, n int) []string {
	e.t.Helper()
	names := []string{e.c.Master}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-master-b%02d", e.c.Name, i)
		if err := e.add(ctx, name, nil); err != nil {
			e.t.Fatalf("add %s: %v", name, err)
		}
		names = append(names, name)
	}
	return names
}

// TestRollingUpgradeRecreate upgrades 3 replicas one by one, each
// recreated on its data disk with the new template; clients of the LB see
// no failure; a re-run finds nothing to do.
func TestRollingUpgradeRecreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "upg", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := e.grow(ctx, 2)
	upgrade := func(version string) error {
		d := e.deps(nil)
		return workflows.Execute(ctx, d, workflows.RollingUpgrade(d, workflows.UpgradeParams{
			Version: version, Strategy: workflows.StrategyRecreate, DrainGrace: 300 * time.Millisecond, HealthTimeout: 2 * time.Minute}, 3), workflows.Options{})
	}
	before, _ := e.c.Provider.Instances().List(ctx)
	pr := startProber(e)
	e.c.Fake.ResetStats()
	start := time.Now()
	if err := upgrade("v1.31.0"); err != nil {
		t.Fatalf("rolling-upgrade: %v", err)
	}
	pr.Finish()
	t.Logf("rolling-upgrade of 3 replicas: %v, %d API calls; readyz through the LB: %d ok, %d failed", time.Since(start).Round(time.Millisecond), total(e.c.Fake.Calls()), pr.OK.Load(), pr.Failed.Load())
	if pr.Failed.Load() != 0 {
		t.Errorf("%d client failures through the LB during the upgrade", pr.Failed.Load())
	}
	after, err := e.c.Provider.Instances().List(ctx)
	if err != nil || len(after) != 3 {
		t.Fatalf("after upgrade: %d replicas, %v", len(after), err)
	}
	for i, r := range after {
		if r.Template.Version != "v1.31.0" || r.Address != before[i].Address || r.Zone != before[i].Zone {
			t.Errorf("replica %s after upgrade: version %s address %s zone %s; before: address %s zone %s", r.Name, r.Template.Version, r.Address, r.Zone, before[i].Address, before[i].Zone)
		}
		if r.Template.Env["CLUSTER_NAME"] != "upg" || r.Template.Machine[gce.MachineImage] != before[i].Template.Machine[gce.MachineImage] {
			t.Errorf("replica %s lost cloned settings: %v", r.Name, r.Template.Machine)
		}
	}
	// kube-up masters: the devel upload became v1.31.0's release from the
	// mirror, as kube-up's upgrade writes it, and that is what they run.
	e.assertRelease(ctx, "v1.31.0", names...)
	e.assertConverged(ctx, names...)
	if err := upgrade("v1.31.0"); err != nil {
		t.Fatalf("second run: %v", err)
	}
}

func TestGrowAndShrink1to3to1(t *testing.T) {
	t.Parallel()
	growShrink(t, newEnv(t, "grow", gcetest.Options{}))
}

// TestRollingUpgradeBadFlagRollsBack upgrades kube-up masters to an
// apiserver flag the apiserver refuses, carried as kube-up carries extra
// flags (kube-env APISERVER_TEST_ARGS), with the surge strategy: the new
// master (cloned, learners in both etcd clusters) never gets ready and is
// removed again, members and all; master 0 is never touched.
func TestRollingUpgradeBadFlagRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "badflag", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := e.deps(nil)
	start := time.Now()
	err := workflows.Execute(ctx, d, workflows.RollingUpgrade(d, workflows.UpgradeParams{ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true,
		Strategy: workflows.StrategySurge, DrainGrace: 300 * time.Millisecond, HealthTimeout: 20 * time.Second}, 1), workflows.Options{})
	// A real kube-up master's apiserver crash-loops under the kubelet and
	// its VM runs on: the provider cannot tell that from a slow start, so
	// the gate waits out its timeout (no fail-fast on GCE).
	if !errors.Is(err, workflows.ErrConcluded) {
		t.Fatalf("rolling-upgrade to a refused flag: %v; want a concluded rollback", err)
	}
	t.Logf("refused flag to rollback complete: %v", time.Since(start).Round(time.Millisecond))
	rs, err := e.c.Provider.Instances().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if len(r.Template.ExtraArgs) != 0 || r.Template.Env[kubeenv.APIServerTestArgs] != "" {
			t.Errorf("%s kept the refused flag: %v", r.Name, r.Template.ExtraArgs)
		}
	}
	e.assertConverged(ctx, e.c.Master)
}
