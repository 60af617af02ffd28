package gce_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/providers/gce/gcefake"
	"github.com/hamaster/hamaster/providers/gce/gcetest"
	"github.com/hamaster/hamaster/workflows"
)

// kubeEnvOf is an instance's kube-env as the Compute API holds it.
func (e *env) kubeEnvOf(name string) map[string]string {
	e.t.Helper()
	in := e.c.Fake.Resource("instances", name)
	if in == nil {
		e.t.Fatalf("no instance %s", name)
	}
	for _, it := range in["metadata"].(map[string]any)["items"].([]any) {
		if it := it.(map[string]any); it["key"] == kubeenv.KeyEnv {
			env, err := kubeenv.Parse(it["value"].(string))
			if err != nil {
				e.t.Fatalf("%s: %v", name, err)
			}
			return env
		}
	}
	e.t.Fatalf("instance %s has no kube-env", name)
	return nil
}

// mirrorSHA512 downloads a tarball from the fake's release mirror and
// hashes it (what the master will check, computed independently of the
// published .sha512).
func (e *env) mirrorSHA512(url string) string {
	e.t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return kubeenv.SHA512Hex(b)
}

// assertRelease checks that each master boots from version's release on
// the mirror, as kube-up's upgrade writes it (tars_from_version): the
// release URLs with the tarballs' hashes, no KUBE_VERSION; and that its
// apiserver reports version.
func (e *env) assertRelease(ctx context.Context, version string, names ...string) {
	e.t.Helper()
	server, manifests := kubeenv.ReleaseURLs(e.c.Fake.ReleaseURL(), version)
	want := map[string]string{
		kubeenv.ServerBinaryTarURL: server, kubeenv.ServerBinaryTarHash: e.mirrorSHA512(server),
		kubeenv.KubeManifestsTarURL: manifests, kubeenv.KubeManifestsTarHash: e.mirrorSHA512(manifests),
	}
	d := e.deps(nil)
	for _, n := range names {
		env := e.kubeEnvOf(n)
		for k, v := range want {
			if env[k] != v {
				e.t.Errorf("%s: kube-env %s=%q, want %q", n, k, env[k], v)
			}
		}
		if v, ok := env[kubeenv.KubeVersion]; ok {
			e.t.Errorf("%s: kube-env has KUBE_VERSION=%q, which no kube-up master reads", n, v)
		}
		rep, err := e.c.Provider.Instances().Get(ctx, n)
		if err != nil {
			e.t.Fatal(err)
		}
		if got, err := d.ReplicaVersion(ctx, rep); err != nil || got != version {
			e.t.Errorf("%s: /version = %q, %v; want %s", n, got, err, version)
		}
	}
}

// TestRollingUpgradeMissingReleaseRefused asks for a version the release
// mirror does not have: refused before anything changes, naming --version
// and the URL tried; no instance, disk or address is touched.
func TestRollingUpgradeMissingReleaseRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "norel", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := kubeenv.Render(e.kubeEnvOf(e.c.Master))
	e.c.Fake.ResetStats()
	for _, strategy := range []string{workflows.StrategyRecreate, workflows.StrategySurge} {
		d := e.deps(nil)
		err := workflows.Execute(ctx, d, workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: "v1.31.7", Strategy: strategy,
			AllowDowntime: true, DrainGrace: 100 * time.Millisecond, HealthTimeout: 20 * time.Second}, 1), workflows.Options{})
		tried := e.c.Fake.ReleaseURL() + "/v1.31.7/kubernetes-server-linux-amd64.tar.gz.sha512"
		if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--version v1.31.7") || !strings.Contains(err.Error(), tried) {
			t.Fatalf("%s to a version the mirror lacks: %v; want InvalidArgument naming --version v1.31.7 and %s", strategy, err, tried)
		}
		t.Logf("%s: %v", strategy, err)
	}
	for m, n := range e.c.Fake.Calls() {
		if verb := m[strings.LastIndex(m, ".")+1:]; verb != "get" && verb != "list" && verb != "aggregatedList" && verb != "wait" {
			t.Errorf("refused upgrade called %s %d times", m, n)
		}
	}
	if after := kubeenv.Render(e.kubeEnvOf(e.c.Master)); after != before {
		t.Errorf("master 0's kube-env changed")
	}
	e.assertConverged(ctx, e.c.Master)
}

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
	names := []string{e.c.Master}
	for i := 1; i <= 2; i++ {
		n := fmt.Sprintf("badhash-master-b%02d", i)
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
		names = append(names, n)
	}
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
		// download-or-bust to report the mismatch.
		deadline := time.Now().Add(60 * time.Second)
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
				t.Errorf("no recreated master's serial output named the hash mismatch within 60s")
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

// TestCreateAtRelease creates a master from master 0's template at a
// release version (what surge's new replicas get): it boots from the
// mirror's tarball, reports that version and reads back at it.
func TestCreateAtRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "mkrel", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := e.c.Master + "-r31"
	if _, err := e.c.Provider.Instances().ReserveAddress(ctx, name, gcetest.ZoneA); err != nil {
		t.Fatal(err)
	}
	tmpl := e.c.StandaloneTemplate(ctx, t, name)
	if tmpl.Version != "" {
		t.Fatalf("master 0 (devel upload) reads as version %q, want none", tmpl.Version)
	}
	tmpl.Version = "v1.31.0"
	r, err := e.c.Provider.Instances().Create(ctx, name, gcetest.ZoneA, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if r.Template.Version != "v1.31.0" {
		t.Errorf("created master reads back at version %q", r.Template.Version)
	}
	// Its apiserver answers once configure.sh installed the tarball.
	d := e.deps(nil)
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := d.Probe(ctx, e.c.Provider.APIServerURL(r), "/readyz"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s never ready: %v\n%s", name, err, e.c.Fake.SerialPortOutput(gcetest.ZoneA, name))
		}
		<-tick.C
	}
	e.assertRelease(ctx, "v1.31.0", name)
	if err := e.c.Provider.Instances().Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
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
	cli, err := e.c.Provider.Etcd(ctx)
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
