package gce_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
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

// TestCreateAtRelease creates a master from master 0's template at a
// release version (what surge's new replicas get): it boots from the
// mirror's tarball, reports that version and reads back at it.
func TestCreateAtRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "mkrel", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
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
