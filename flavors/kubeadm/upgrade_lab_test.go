//go:build metallab

package kubeadm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/remote"
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
	o, lab, p, h1, run := singleMaster(ctx, t)
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
	registry.Attach(p, f)
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

// An upgraded etcd that ran on the data and is not healthy, with
// kubeadm stopped before its own rollback (hamaster stopped mid-upgrade:
// UpgradeMaster's context cancelled once the new etcd manifest is in
// place and the broken etcd wrote to the data dir, as a hamaster killed
// and resumed, or its timeout, would): RollbackMaster puts back the old
// etcd manifest and kubeadm's etcd data backup of this upgrade
// (staticpods.go performEtcdStaticPodUpgrade's copy, which its
// rollbackEtcdData would have restored), keeps the touched data aside
// where its log says, and a second RollbackMaster does nothing; then,
// the broken etcd disarmed, the upgrade succeeds.
func TestRollbackKubeadmEtcdData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	o, lab, p, h1, run := singleMaster(ctx, t)
	logs := &syncbuf.Buffer{}
	f := labFlavorLog(t, lab, p, slog.New(slog.NewJSONHandler(io.MultiWriter(logs, tWriter{t}), nil)))
	r1 := providers.Replica{Name: h1.Name, Address: h1.Addr.String()}
	kubectl := "kubectl --kubeconfig /etc/kubernetes/admin.conf "
	const cm = "hamaster-etcd-rollback"
	run(kubectl + "-n default create configmap " + cm + " --from-literal=key=before")
	oldEtcd := run("cat /etc/kubernetes/manifests/etcd.yaml")
	tag := metallabtest.EtcdImageTag(t, o.BinDir, upgradeVersion)
	if strings.Contains(oldEtcd, "/etcd:"+tag) {
		t.Fatalf("kubeadm %s's etcd is %s already: the upgrade would not change its manifest", labVersion, tag)
	}
	disarm := metallabtest.BrokenEtcd(t, o.BinDir, tag)
	marker := "/var/lib/etcd/" + metallabtest.BrokenEtcdMarker

	uctx, ucancel := context.WithCancel(ctx)
	defer ucancel()
	upErr := make(chan error, 1)
	start := time.Now()
	go func() { upErr <- f.UpgradeMaster(uctx, r1, upgradeVersion, true, 0) }()
	var early error
	err := wait.Until(ctx, 500*time.Millisecond, "the new etcd manifest written and the broken etcd run on the data", func() (bool, error) {
		select {
		case early = <-upErr:
			return false, fmt.Errorf("UpgradeMaster returned first: %v", early)
		default:
		}
		out := run("grep -c '/etcd:" + tag + "' /etc/kubernetes/manifests/etcd.yaml 2>/dev/null; test -e " + marker + " && echo marker || true")
		return strings.HasPrefix(out, "1") && strings.Contains(out, "marker"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the broken etcd %s ran on the data %v after UpgradeMaster started; stopping UpgradeMaster", tag, time.Since(start).Round(time.Millisecond))
	ucancel()
	select {
	case err = <-upErr:
	case <-ctx.Done():
		t.Fatal("UpgradeMaster did not return after its context was cancelled")
	}
	if err == nil {
		t.Fatal("UpgradeMaster with a broken etcd succeeded")
	}
	t.Logf("UpgradeMaster stopped: %v", err)
	if out := run("ls -d /etc/kubernetes/tmp/kubeadm-backup-etcd-*/etcd"); out == "" {
		t.Fatal("kubeadm made no etcd data backup")
	}

	start = time.Now()
	if err := f.RollbackMaster(ctx, r1, true); err != nil {
		t.Fatalf("RollbackMaster: %v", err)
	}
	t.Logf("RollbackMaster took %v", time.Since(start).Round(time.Millisecond))
	if v, err := f.RunningVersion(ctx, h1.Name); err != nil || v != labVersion {
		t.Errorf("after the rollback the apiserver manifest is at %q, %v; want %s", v, err, labVersion)
	}
	if got := run("cat /etc/kubernetes/manifests/etcd.yaml"); got != oldEtcd {
		t.Errorf("etcd's manifest after the rollback is not the old one:\n%s", got)
	}
	if out := run("test -e " + marker + " && echo present || echo absent"); out != "absent" {
		t.Errorf("the broken etcd's marker is in the data dir after the rollback")
	}
	restores := logged(t, logs, "restored etcd's data from kubeadm's backup of this upgrade; the upgraded etcd's data is kept aside")
	if len(restores) != 1 {
		t.Fatalf("RollbackMaster logged %d restores of etcd's data, want 1", len(restores))
	}
	kept, _ := restores[0]["kept"].(string)
	backup, _ := restores[0]["backup"].(string)
	t.Logf("etcd's data restored from %s; the touched data kept in %s", backup, kept)
	if !strings.HasPrefix(backup, "/etc/kubernetes/tmp/kubeadm-backup-etcd-") || !strings.HasPrefix(kept, "/var/lib/etcd") {
		t.Errorf("logged backup %q, kept %q", backup, kept)
	}
	if out := run("test -e " + remote.ShellQuote(kept+"/"+metallabtest.BrokenEtcdMarker) + " && test -d " + remote.ShellQuote(kept+"/member") + " && echo kept || echo lost"); out != "kept" {
		t.Errorf("the touched data is not whole in %s", kept)
	}
	if got := run(kubectl + "-n default get configmap " + cm + " -o jsonpath={.data.key}"); got != "before" {
		t.Errorf("the ConfigMap written before the upgrade reads %q after the rollback", got)
	}
	if out := run("ls -A /var/lib/hamaster"); strings.Contains(out, "upgrade-backup") {
		t.Errorf("the backup is left after the rollback: %s", out)
	}
	asides := run("ls -d /var/lib/etcd/hamaster-rollback-* /var/lib/etcd.hamaster-rollback-* 2>/dev/null || true")

	// A second rollback: nothing to do.
	if err := f.RollbackMaster(ctx, r1, true); err != nil {
		t.Errorf("a second RollbackMaster: %v", err)
	}
	if n := len(logged(t, logs, "restored etcd's data from kubeadm's backup of this upgrade; the upgraded etcd's data is kept aside")); n != 1 {
		t.Errorf("after a second RollbackMaster etcd's data was restored %d times", n)
	}
	if got := run("ls -d /var/lib/etcd/hamaster-rollback-* /var/lib/etcd.hamaster-rollback-* 2>/dev/null || true"); got != asides {
		t.Errorf("a second RollbackMaster changed what is kept aside: %q, was %q", got, asides)
	}
	if got := run("cat /etc/kubernetes/manifests/etcd.yaml"); got != oldEtcd {
		t.Errorf("etcd's manifest after a second rollback is not the old one:\n%s", got)
	}
	if t.Failed() {
		return
	}

	// The broken etcd disarmed, the upgrade succeeds on the restored data.
	disarm()
	start = time.Now()
	if err := f.UpgradeMaster(ctx, r1, upgradeVersion, true, 0); err != nil {
		t.Fatalf("UpgradeMaster(%s) after the rollback: %v", upgradeVersion, err)
	}
	t.Logf("UpgradeMaster(%s) took %v", upgradeVersion, time.Since(start).Round(time.Millisecond))
	if got := run("grep -c '/etcd:" + tag + "' /etc/kubernetes/manifests/etcd.yaml || true"); got != "1" {
		t.Errorf("etcd's manifest after the upgrade does not run %s", tag)
	}
	if got := run(kubectl + "-n default get configmap " + cm + " -o jsonpath={.data.key}"); got != "before" {
		t.Errorf("the ConfigMap reads %q after the upgrade", got)
	}
	if err := f.FinishUpgrade(ctx, r1); err != nil {
		t.Fatal(err)
	}
}

// tWriter writes each log line to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// logged is the records of the JSON log in b whose message is msg.
func logged(t *testing.T, b *syncbuf.Buffer, msg string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(b.String(), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			recs = append(recs, r)
		}
	}
	return recs
}

// singleMaster is a lab of one host (the binaries of labVersion and
// upgradeVersion in o.BinDir) made a single master at labVersion by
// kubeadm init, and run, a command on it.
func singleMaster(ctx context.Context, t *testing.T) (o metallab.Options, lab *metallab.Lab, p *metal.Provider, h1 *metallab.Host, run func(cmd string) string) {
	t.Helper()
	o = metallabtest.KubeadmOptions(t, 1, labVersion, upgradeVersion)
	lab, p, runOn := kubeadmHosts(ctx, t, o)
	h1 = lab.Hosts[0]
	run = func(cmd string) string {
		t.Helper()
		return runOn(h1.Name, cmd)
	}
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion}); err != nil {
		t.Fatal(err)
	}
	return o, lab, p, h1, run
}
