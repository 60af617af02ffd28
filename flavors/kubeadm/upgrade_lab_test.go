//go:build metallab

package kubeadm_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const upgradeVersion = "v1.34.4"

// In-place upgrade of a kubeadm-built single master (v1.33.13, no
// controlPlaneEndpoint): a refused apiserver flag and an unstartable
// release are each noticed (an *APIServerFailedError: kubeadm stopped on
// the apiserver's own failure, not its timeout) and rolled back to a
// master healthy at v1.33.13; then the upgrade to v1.34.4
// succeeds (kubeadm upgrade plan reads v1.34.4, the Node reports a
// v1.34.4 kubelet).
func TestUpgradeKubeadmMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	o := metallabtest.KubeadmOptions(t, 1, labVersion, upgradeVersion)
	lab, p, runOn := kubeadmHosts(ctx, t, o)
	h1 := lab.Hosts[0]
	run := func(cmd string) string {
		t.Helper()
		return runOn(h1.Name, cmd)
	}
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion}); err != nil {
		t.Fatal(err)
	}
	f := labFlavor(t, lab, p)
	r1 := providers.Replica{Name: h1.Name, Address: h1.Addr.String()}
	kubectl := "kubectl --kubeconfig /etc/kubernetes/admin.conf "
	atOldVersion := func() {
		t.Helper()
		if v, err := f.RunningVersion(ctx, h1.Name); err != nil || v != labVersion {
			t.Errorf("after the rollback the apiserver manifest is at %q, %v; want %s", v, err, labVersion)
		}
		_, cfg, err := f.ClusterConfigurationOf(ctx, h1.Name)
		if err != nil || cfg.KubernetesVersion != labVersion {
			t.Errorf("after the rollback kubeadm-config's kubernetesVersion is %q, %v", cfg.KubernetesVersion, err)
		}
		if v := run("kubeadm version -o short"); v != labVersion {
			t.Errorf("kubeadm after the rollback: %s", v)
		}
		if v := run("kubelet --version"); v != "Kubernetes "+labVersion {
			t.Errorf("kubelet after the rollback: %s", v)
		}
		if out := run("ls -A /var/lib/hamaster"); strings.Contains(out, "upgrade-backup") {
			t.Errorf("the backup is left after the rollback: %s", out)
		}
	}
	// failThenRollback upgrades with fu, which must fail fast (on the
	// apiserver's failure: an *APIServerFailedError), then rolls back to
	// a master healthy at the old version, and logs the time from the
	// failure to that: a speed figure, not asserted (make bench's
	// BenchmarkBadFlagRollback measures a rollback's time, on the local
	// provider).
	failThenRollback := func(name string, fu interface {
		UpgradeMaster(context.Context, providers.Replica, string, bool, time.Duration) error
	}) {
		t.Helper()
		start := time.Now()
		err := fu.UpgradeMaster(ctx, r1, upgradeVersion, true, 0)
		var af *kubeadm.APIServerFailedError
		if !errors.As(err, &af) {
			t.Fatalf("%s: UpgradeMaster = %v; want an *APIServerFailedError", name, err)
		}
		failed := time.Now()
		t.Logf("%s: UpgradeMaster failed after %v: %v", name, failed.Sub(start).Round(time.Millisecond), err)
		if err := f.RollbackMaster(ctx, r1, true); err != nil {
			t.Fatalf("%s: RollbackMaster: %v", name, err)
		}
		took := time.Since(failed)
		// The failure: the new apiserver's exit (its log's last write).
		t.Logf("%s: noticed %v after the new apiserver exited (%v after it started, %v after kubeadm changed its manifest); healthy at %s %v after that (rollback): %v from the failure",
			name, af.Exited, af.Started.Round(100*time.Millisecond), af.After.Round(100*time.Millisecond), labVersion, took.Round(100*time.Millisecond), (af.Exited + took).Round(100*time.Millisecond))
		atOldVersion()
		if err := f.RollbackMaster(ctx, r1, true); err != nil {
			t.Errorf("%s: a second RollbackMaster: %v", name, err)
		}
	}

	// A refused flag: kube-apiserver v1.34.4 exits on an unknown flag.
	failThenRollback("refused flag", f.WithAPIServerArgs([]string{"--hamaster-refused-flag=true"}))
	if t.Failed() {
		return
	}
	if doc, _, err := f.ClusterConfigurationOf(ctx, h1.Name); err != nil || strings.Contains(string(doc), "hamaster-refused-flag") {
		t.Errorf("kubeadm-config keeps the refused flag after the rollback (%v):\n%s", err, doc)
	}

	// An unstartable release: its kube-apiserver exits at once.
	restore := metallabtest.Unstartable(t, o.BinDir, upgradeVersion)
	failThenRollback("unstartable version", f)
	restore()
	if t.Failed() {
		return
	}

	// The upgrade.
	start := time.Now()
	if err := f.UpgradeMaster(ctx, r1, upgradeVersion, true, 0); err != nil {
		t.Fatalf("UpgradeMaster(%s): %v", upgradeVersion, err)
	}
	t.Logf("UpgradeMaster(%s) took %v", upgradeVersion, time.Since(start).Round(time.Millisecond))
	if plan := run("kubeadm upgrade plan " + upgradeVersion + " --ignore-preflight-errors=" + metallab.IgnorePreflightErrors + " 2>&1 || true"); !strings.Contains(plan, "Cluster version: "+strings.TrimPrefix(upgradeVersion, "v")) && !strings.Contains(plan, "Cluster version: "+upgradeVersion) {
		t.Errorf("kubeadm upgrade plan does not read the cluster at %s:\n%s", upgradeVersion, plan)
	}
	var kv string
	if err := wait.Until(ctx, 250*time.Millisecond, "the Node's kubelet at "+upgradeVersion, func() (bool, error) {
		kv = run(kubectl + "get node " + h1.Name + " -o jsonpath={.status.nodeInfo.kubeletVersion}")
		return kv == upgradeVersion, nil
	}); err != nil {
		t.Errorf("%v (kubeletVersion %q)", err, kv)
	}
	// Idempotent: a re-run finds the master upgraded.
	if err := f.UpgradeMaster(ctx, r1, upgradeVersion, true, 0); err != nil {
		t.Errorf("UpgradeMaster again: %v", err)
	}
	if err := f.FinishUpgrade(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if out := run("ls -A /var/lib/hamaster"); strings.Contains(out, "upgrade-backup") {
		t.Errorf("FinishUpgrade left the backup: %s", out)
	}
	// Nothing saved: a rollback does nothing.
	if err := f.RollbackMaster(ctx, r1, true); err != nil {
		t.Errorf("RollbackMaster without a backup: %v", err)
	}
	if v, err := f.RunningVersion(ctx, h1.Name); err != nil || v != upgradeVersion {
		t.Errorf("after FinishUpgrade and a no-op rollback: %q, %v", v, err)
	}
}

// labFlavor is the kubeadm flavor over p, upgrading as on the lab's
// hosts: with the install command and preflight exceptions the lab's
// hamaster.env gives (checked), the kubelet restarted by the lab as
// `systemctl restart kubelet` would (its hosts have no systemctl).
func labFlavor(t *testing.T, lab *metallab.Lab, p *metal.Provider) *kubeadm.Flavor {
	t.Helper()
	return labFlavorLog(t, lab, p, nil)
}

// labFlavorLog is labFlavor logging to log.
func labFlavorLog(t *testing.T, lab *metallab.Lab, p *metal.Provider, log *slog.Logger) *kubeadm.Flavor {
	t.Helper()
	f, err := kubeadm.New(p, log)
	if err != nil {
		t.Fatal(err)
	}
	o := kubeadm.UpgradeOptionsFromEnv(func(k string) string { return envOf(t, lab.EnvFile, k) })
	if o.InstallCommand != metallab.InstallCommand || len(o.IgnorePreflightErrors) != 1 {
		t.Fatalf("options from hamaster.env: %+v", o)
	}
	f.SetUpgradeOptions(kubeadm.UpgradeOptions{
		InstallCommand:        o.InstallCommand,
		IgnorePreflightErrors: o.IgnorePreflightErrors,
		RestartKubelet:        func(_ context.Context, machine string) error { return lab.RestartKubelet(lab.Host(machine)) },
	})
	return f
}

// envOf is the value hamaster.env (env) exports for key, as sh reads it.
func envOf(t *testing.T, env, key string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", ". "+env+" && printf %s \"$"+key+"\"").Output()
	if err != nil {
		t.Fatalf("read %s from %s: %v", key, env, err)
	}
	return string(out)
}

// Two masters (kubeadm init with the VIP as controlPlaneEndpoint, the
// second joined): the first upgraded by `kubeadm upgrade apply`, the
// second by `kubeadm upgrade node`, which an unstartable release makes
// fail first: it alone is rolled back (first=false: the cluster-wide
// configuration stays the upgraded one), then upgraded.
func TestUpgradeKubeadmTwoMasters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	o := metallabtest.KubeadmOptions(t, 2, labVersion, upgradeVersion)
	lab, p, run := kubeadmHosts(ctx, t, o)
	h1, h2 := lab.Hosts[0], lab.Hosts[1]
	run(h1.Name, "ip addr add "+lab.VIP.String()+"/24 dev eth0")
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion, ControlPlaneEndpoint: lab.VIPEndpoint()}); err != nil {
		t.Fatal(err)
	}
	f := labFlavor(t, lab, p)
	r2, err := p.Instances().Create(ctx, h2.Name, "", providers.Template{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Join(ctx, r2, 0); err != nil {
		t.Fatalf("Join(host-2): %v", err)
	}
	r1 := providers.Replica{Name: h1.Name, Address: h1.Addr.String()}
	kubeletVersion := func(h *metallab.Host, want string) {
		t.Helper()
		var kv string
		if err := wait.Until(ctx, 250*time.Millisecond, h.Name+"'s Node kubelet at "+want, func() (bool, error) {
			kv = run(h1.Name, "kubectl --kubeconfig /etc/kubernetes/admin.conf get node "+h.Name+" -o jsonpath={.status.nodeInfo.kubeletVersion}")
			return kv == want, nil
		}); err != nil {
			t.Errorf("%v (kubeletVersion %q)", err, kv)
		}
	}

	start := time.Now()
	if err := f.UpgradeMaster(ctx, r1, upgradeVersion, true, 0); err != nil {
		t.Fatalf("UpgradeMaster(host-1, first): %v", err)
	}
	t.Logf("kubeadm upgrade apply on host-1: %v", time.Since(start).Round(time.Millisecond))
	kubeletVersion(h1, upgradeVersion)

	// host-2's upgrade node meets an unstartable release.
	restore := metallabtest.Unstartable(t, o.BinDir, upgradeVersion)
	err = f.UpgradeMaster(ctx, r2, upgradeVersion, false, 0)
	var af *kubeadm.APIServerFailedError
	if !errors.As(err, &af) {
		t.Fatalf("UpgradeMaster(host-2) with an unstartable release = %v; want an *APIServerFailedError", err)
	}
	failed := time.Now()
	if err := f.RollbackMaster(ctx, r2, false); err != nil {
		t.Fatalf("RollbackMaster(host-2): %v", err)
	}
	took := time.Since(failed)
	// Failed fast (an *APIServerFailedError, above) and rolled back
	// (below); the time is a speed figure, logged only.
	t.Logf("host-2 (upgrade node): %v; healthy at %s %v later: %v from the failure", err, labVersion, took.Round(100*time.Millisecond), (af.Exited + took).Round(100*time.Millisecond))
	if v, err := f.RunningVersion(ctx, h2.Name); err != nil || v != labVersion {
		t.Errorf("host-2 after its rollback: %q, %v", v, err)
	}
	if _, cfg, err := f.ClusterConfigurationOf(ctx, h1.Name); err != nil || cfg.KubernetesVersion != upgradeVersion {
		t.Errorf("kubeadm-config after host-2's rollback: %q, %v; want %s (a node's rollback leaves the cluster's)", cfg.KubernetesVersion, err, upgradeVersion)
	}
	restore()

	start = time.Now()
	if err := f.UpgradeMaster(ctx, r2, upgradeVersion, false, 0); err != nil {
		t.Fatalf("UpgradeMaster(host-2): %v", err)
	}
	t.Logf("kubeadm upgrade node on host-2: %v", time.Since(start).Round(time.Millisecond))
	kubeletVersion(h2, upgradeVersion)
	for _, h := range lab.Hosts {
		if v, err := f.RunningVersion(ctx, h.Name); err != nil || v != upgradeVersion {
			t.Errorf("%s: %q, %v", h.Name, v, err)
		}
	}
	plan := run(h2.Name, "kubeadm upgrade plan "+upgradeVersion+" --ignore-preflight-errors="+metallab.IgnorePreflightErrors+" 2>&1 || true")
	if !strings.Contains(plan, "Cluster version: "+strings.TrimPrefix(upgradeVersion, "v")) && !strings.Contains(plan, "Cluster version: "+upgradeVersion) {
		t.Errorf("kubeadm upgrade plan on host-2:\n%s", plan)
	}
	for _, r := range []providers.Replica{r1, r2} {
		if err := f.FinishUpgrade(ctx, r); err != nil {
			t.Error(err)
		}
	}
}
