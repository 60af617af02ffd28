//go:build fidelity

// The slow fidelity tier: upgrades whose recreated master never boots
// (a release tarball failing its hash) wait out their health timeouts.
// Built only with -tags fidelity; .ci/run runs them after 'make test',
// which stays under 10 minutes on 2 cores.

package gce_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/workflows"
)

// TestRollingUpgradeBadReleaseHashRollsBack upgrades three masters on
// kube-up's devel upload to a release whose tarball does not match its
// published hash: the first recreated master never comes up
// (configure.sh's download-or-bust retries the hash check forever, and its
// serial output says so), the health gate times out, that master is
// restored from its devel upload and the others are never touched.
func TestRollingUpgradeBadReleaseHashRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "badhash", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.c.Fake.AddRelease("v1.31.1", gcefake.ReleaseOptions{BadServerHash: true}); err != nil {
		t.Fatal(err)
	}
	names := e.grow(ctx, 2)
	devel := map[string]map[string]string{}
	for _, n := range names {
		devel[n] = e.kubeEnvOf(n)
	}
	serverURL, _ := kubeenv.ReleaseURLs(e.c.Fake.ReleaseURL(), "v1.31.1")
	var failed, serial string
	after := func(step string) error {
		if step != "replica-1/recreate" {
			return nil
		}
		// The recreated master is up to configure.sh: wait for its
		// download-or-bust to report the mismatch (a hang guard: seconds
		// are expected).
		deadline := time.Now().Add(10 * time.Minute)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, n := range names {
				zone := gcetest.ZoneA
				if r, err := e.c.Provider.Instances().Get(ctx, n); err == nil {
					zone = r.Zone
				}
				if out := e.c.Fake.SerialPortOutput(zone, n); strings.Contains(out, "Hash validation of "+serverURL+" failed") {
					failed, serial = n, out
					return nil
				}
			}
			if time.Now().After(deadline) {
				t.Errorf("no recreated master's serial output named the hash mismatch within 10 minutes, a hang guard")
				return nil
			}
			<-tick.C
		}
	}
	d := e.deps(after)
	start := time.Now()
	err := workflows.Execute(ctx, d, workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: "v1.31.1", Strategy: workflows.StrategyRecreate,
		DrainGrace: 100 * time.Millisecond, HealthTimeout: 40 * time.Second}, 3), workflows.Options{})
	if !errors.Is(err, workflows.ErrConcluded) {
		t.Fatalf("rolling-upgrade to a release with a bad hash: %v; want a concluded rollback", err)
	}
	t.Logf("bad hash to rollback complete: %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.Contains(serial, "corrupted, sha1 ") || !strings.Contains(err.Error(), failed) {
		t.Errorf("%s's serial output lacks validate-hash's message, or the error does not name it:\n%s", failed, serial)
	}
	for _, n := range names {
		env := e.kubeEnvOf(n)
		for _, k := range []string{kubeenv.ServerBinaryTarURL, kubeenv.ServerBinaryTarHash, kubeenv.KubeManifestsTarURL, kubeenv.KubeManifestsTarHash} {
			if env[k] != devel[n][k] {
				t.Errorf("%s after rollback: kube-env %s=%q, want the devel upload's %q", n, k, env[k], devel[n][k])
			}
		}
		rep, err := e.c.Provider.Instances().Get(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := d.ReplicaVersion(ctx, rep); err != nil || v != kubeuptest.DefaultDevelVersion {
			t.Errorf("%s after rollback: /version = %q, %v; want the devel upload's %s", n, v, err, kubeuptest.DefaultDevelVersion)
		}
	}
	e.assertConverged(ctx, names...)
}

// TestSoleMasterBadReleaseRollsBack: rolling-upgrade --allow-downtime of a
// single master to a release whose tarball does not match its hash. The
// recreated master never comes up, so the cluster's only etcd is down for
// longer than the lock's lease: the run may not prove its lock meanwhile,
// goes on to its rollback all the same (nobody can take the lock while
// etcd is down), proves the lock again once the restored master serves,
// and leaves the cluster at its devel upload and unlocked.
func TestSoleMasterBadReleaseRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "solebad", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.c.Fake.AddRelease("v1.31.1", gcefake.ReleaseOptions{BadServerHash: true}); err != nil {
		t.Fatal(err)
	}
	devel := e.kubeEnvOf(e.c.Master)
	d := e.deps(nil)
	start := time.Now()
	// HealthTimeout outlasts the lock's lease (LockTTL) on purpose.
	err := workflows.Execute(ctx, d, workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: "v1.31.1", Strategy: workflows.StrategyRecreate,
		DrainGrace: 100 * time.Millisecond, HealthTimeout: (workflows.LockTTL + 5) * time.Second, AllowDowntime: true}, 1),
		workflows.Options{SoleReplicaOutage: true})
	if !errors.Is(err, workflows.ErrConcluded) {
		t.Fatalf("rolling-upgrade --allow-downtime of the only master to a bad release: %v; want a concluded rollback", err)
	}
	t.Logf("sole master, bad release to rollback complete: %v: %v", time.Since(start).Round(time.Millisecond), err)
	env := e.kubeEnvOf(e.c.Master)
	for _, k := range []string{kubeenv.ServerBinaryTarURL, kubeenv.ServerBinaryTarHash} {
		if env[k] != devel[k] {
			t.Errorf("after rollback: kube-env %s=%q, want the devel upload's %q", k, env[k], devel[k])
		}
	}
	rep, err := e.c.Provider.Instances().Get(ctx, e.c.Master)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.ReplicaVersion(ctx, rep); err != nil || v != kubeuptest.DefaultDevelVersion {
		t.Errorf("after rollback: /version = %q, %v; want the devel upload's %s", v, err, kubeuptest.DefaultDevelVersion)
	}
	// The lock was released (or at worst expires): the next command runs.
	cli, err := e.c.Flavor(t).EtcdCluster(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lctx, lcancel := context.WithTimeout(ctx, (workflows.LockTTL+10)*time.Second)
	defer lcancel()
	l, err := workflows.AcquireLock(lctx, cli.Raw(), e.c.Settings.Cluster, "test")
	if err != nil {
		t.Fatalf("the next command cannot take the cluster lock: %v", err)
	}
	_ = l.Release(ctx)
}
