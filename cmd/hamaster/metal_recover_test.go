//go:build metallab

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers/metal/vip"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// TestMetalKubeadmRecover is hamaster recover on kubeadm masters on metal
// hosts, through the real CLI:
//   - two masters (kubeadm init, then add-replica: the VIP up, the
//     cluster converted to it); recover is refused while etcd has a
//     quorum;
//   - the second master's host dies (its kubelet and every pod stopped,
//     its link cut): etcd keeps 1 of 2 voters, no quorum;
//   - recover --from the first: its etcd rebuilt as a one-member cluster
//     from its own data (--force-new-cluster through the etcd manifest,
//     the data kept aside), the dead host forgotten (it does not answer)
//     and its Node deleted, the VIP kept (the masters record it as the
//     endpoint): the API answers on the VIP with what was written before
//     the loss;
//   - the dead host comes back: its claim lists it again, and
//     remove-replica resets and frees it, clean;
//   - recover --snapshot --force of the removal's snapshot: what was
//     written after it is gone, what was written before is there;
//   - an upgrade of the sole master left that fails after kubeadm's
//     addon phase, rolled back with kube-proxy and CoreDNS
//     (upgradeFailsAfterAddons).
func TestMetalKubeadmRecover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	lab := metallabtest.StartKubeadm(ctx, t, metallabtest.KubeadmOptions(t, 2, metalVersion, metalUpgradeTo), metalVersion)
	h1, h2 := lab.Hosts[0], lab.Hosts[1]
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: metalVersion}); err != nil {
		t.Fatal(err)
	}
	cli := newLabCLI(ctx, t, lab)
	// On a failure, the newest etcd and kube-apiserver logs of each host
	// (before the lab goes).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, h := range lab.Hosts {
			for _, c := range []string{"etcd", "kube-apiserver"} {
				logs, _ := filepath.Glob(filepath.Join(h.Dir, "var-log-pods", "kube-system_"+c+"-*", c, "*.log"))
				slices.SortFunc(logs, func(a, b string) int { return modTime(b).Compare(modTime(a)) })
				if len(logs) > 0 {
					b, _ := os.ReadFile(logs[0])
					if len(b) > 4000 {
						b = b[len(b)-4000:]
					}
					t.Logf("%s: %s:\n%s", h.Name, logs[0], b)
				}
			}
		}
	})
	const kubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf "
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cli.must(h1, "cat /etc/kubernetes/pki/ca.crt"))) {
		t.Fatal("master 0's ca.crt holds no certificate")
	}
	vipReady := func(what string) {
		t.Helper()
		client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		url := fmt.Sprintf("https://%s:8443/readyz", lab.VIP)
		if err := wait.Until(ctx, 250*time.Millisecond, "the VIP to answer "+what, func() (bool, error) {
			resp, err := client.Get(url)
			if err != nil {
				return false, nil
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// status's JSON whatever its exit code (3 while anything is wrong).
	status := func() (replicas []string, members int) {
		t.Helper()
		cmd, errs := cli.command(nil, "--output", "json", "status", "--timeout", "90s")
		var stdout strings.Builder
		cmd.Stdout = &stdout
		_ = cmd.Run()
		var st struct {
			Replicas []struct {
				Name string `json:"name"`
			} `json:"replicas"`
			Members []any `json:"members"`
		}
		if err := json.Unmarshal([]byte(stdout.String()), &st); err != nil {
			t.Fatalf("status: %v\n%s\n%s", err, stdout.String(), errs)
		}
		for _, r := range st.Replicas {
			replicas = append(replicas, r.Name)
		}
		return replicas, len(st.Members)
	}

	cli.hm("add-replica", "--host", h2.Name, "--yes")
	vipReady("after the add")
	cli.must(h1, kubectl+"create configmap written-before-the-loss --from-literal=k=v")
	// Refused while etcd has a quorum: it would discard the other member.
	if cmd, out := cli.command(nil, "recover", "--from", h1.Name, "--yes"); cmd.Run() == nil || !strings.Contains(out.String(), "still has a quorum") {
		t.Fatalf("recover with a quorum: want refused\n%s", out)
	}

	// The second master's host dies: its kubelet (and its pods) and its
	// units (the VIP's daemons) stop.
	lab.StopKubelet(h2)
	metallabtest.StopUnits(ctx, t, h2)
	link := func(h *metallab.Host, state string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "ip", "-n", lab.Switch(), "link", "set", fmt.Sprintf("h%d", slices.Index(lab.Hosts, h)+1), state).CombinedOutput(); err != nil {
			t.Fatalf("link of %s %s: %v: %s", h.Name, state, err, out)
		}
	}
	link(h2, "down")
	start := time.Now()
	out := cli.hm("recover", "--from", h1.Name, "--yes")
	t.Logf("recover from %s's own data: %s\n%s", h1.Name, time.Since(start).Round(100*time.Millisecond), out)
	if !strings.Contains(out, "remove-replica --name "+h2.Name) {
		t.Errorf("recover does not tell how to clean %s once it answers:\n%s", h2.Name, out)
	}
	vipReady("after recover")
	if v := cli.must(h1, kubectl+"get configmap written-before-the-loss -o jsonpath='{.data.k}'"); v != "v" {
		t.Errorf("a ConfigMap written before the loss: %q after recover", v)
	}
	if n := cli.must(h1, kubectl+"get nodes -o name | wc -l"); n != "1" {
		t.Errorf("Nodes after recover: %s, want %s's alone", n, h1.Name)
	}
	if rs, ms := status(); !slices.Equal(rs, []string{h1.Name}) || ms != 1 {
		t.Errorf("status after recover: replicas %v, %d members; want %s alone, 1 member", rs, ms, h1.Name)
	}
	// The data kept aside once, under hamaster's directory; nothing beside
	// the data directory (a mount point, as a disk of etcd's own is).
	if left := cli.must(h1, "ls -d /var/lib/hamaster/etcd-before-force-new-cluster-*/member | wc -l; ls -d /var/lib/etcd?* 2>/dev/null; ls -A /var/lib/hamaster"); !strings.HasPrefix(left, "1\n") || strings.Contains(left, "recover") || strings.Contains(left, "/var/lib/etcd") {
		t.Errorf("on %s after recover (want the data kept aside once, no recovery files): %s", h1.Name, left)
	}

	// The dead host comes back (its kubelet restarts its static pods: an
	// etcd member of the old cluster, which the new one refuses).
	link(h2, "up")
	if err := lab.Install(ctx, h2, metalVersion); err != nil {
		t.Fatal(err)
	}
	// Its boot starts its enabled units too.
	cli.must(h2, "systemctl start "+vip.KeepalivedUnit+" "+vip.HAProxyUnit)
	if err := wait.Until(ctx, time.Second, h2.Name+" listed again", func() (bool, error) {
		rs, _ := status()
		return slices.Contains(rs, h2.Name), nil
	}); err != nil {
		t.Fatal(err)
	}
	cli.hm("remove-replica", "--name", h2.Name, "--yes")
	if left := cli.must(h2, "find /etc/kubernetes/manifests -name '*.yaml' 2>/dev/null; ls -A /var/lib/etcd 2>/dev/null; cat /var/lib/hamaster/claim 2>/dev/null; ip -o addr show | grep -F ' "+lab.VIP.String()+"/' || true"); left != "" {
		t.Errorf("freed host %s keeps: %s", h2.Name, left)
	}
	vipReady("after the dead host's removal")

	// The newest snapshot is the removal's: restore it.
	var snaps []struct {
		Path string    `json:"path"`
		Time time.Time `json:"time"`
	}
	cli.jsonOut(&snaps, "", "--output", "json", "snapshots")
	if len(snaps) == 0 {
		t.Fatal("no snapshot")
	}
	slices.SortFunc(snaps, func(a, b struct {
		Path string    `json:"path"`
		Time time.Time `json:"time"`
	}) int {
		return a.Time.Compare(b.Time)
	})
	cli.must(h1, kubectl+"create configmap written-after-the-snapshot --from-literal=k=v")
	start = time.Now()
	cli.hm("recover", "--from", h1.Name, "--snapshot", snaps[len(snaps)-1].Path, "--force", "--yes")
	t.Logf("recover from a snapshot: %s", time.Since(start).Round(100*time.Millisecond))
	vipReady("after the restore")
	if got := cli.must(h1, kubectl+"get configmaps -o name"); !strings.Contains(got, "written-before-the-loss") || strings.Contains(got, "written-after-the-snapshot") {
		t.Errorf("ConfigMaps after restoring the snapshot taken between them: %s", got)
	}
	if rs, ms := status(); !slices.Equal(rs, []string{h1.Name}) || ms != 1 {
		t.Errorf("status after the restore: replicas %v, %d members", rs, ms)
	}
	if left := cli.must(h1, "ls -d /var/lib/hamaster/etcd-before-restore-*/member | wc -l; ls -d /var/lib/etcd?* 2>/dev/null; ls -A /var/lib/hamaster"); !strings.HasPrefix(left, "1\n") || strings.Contains(left, "recover") || strings.Contains(left, "/var/lib/etcd") {
		t.Errorf("on %s after the restore (want the data kept aside once, no recovery files): %s", h1.Name, left)
	}
	if t.Failed() {
		return
	}
	upgradeFailsAfterAddons(t, cli, h1)
}

// upgradeFailsAfterAddons: on the sole master h1 (at metalVersion), an
// upgrade whose `kubeadm upgrade apply` goes through its addon phase (no
// other control plane left to wait for: kube-proxy and CoreDNS rewritten
// at metalUpgradeTo), then fails at the kubelet's package, is rolled
// back whole: the master at metalVersion again, and kube-proxy's and
// CoreDNS's objects as they were before (the rollback says it restored
// kube-proxy's DaemonSet: it had changed). A healthy upgraded etcd is
// kept, as kubeadm keeps it (its data is an older etcd's no more).
func upgradeFailsAfterAddons(t *testing.T, cli *labCLI, h1 *metallab.Host) {
	t.Helper()
	const kubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf "
	addons := func() string {
		return cli.must(h1, kubectl+`-n kube-system get daemonset/kube-proxy deployment/coredns configmap/kube-proxy configmap/coredns -o jsonpath='{range .items[*]}{.kind}/{.metadata.name} {.spec.template.spec.containers[*].image} {.data}{"\n"}{end}'`)
	}
	before := addons()
	if !strings.Contains(before, "kube-proxy:"+metalVersion) || !strings.Contains(before, "Deployment/coredns") {
		t.Fatalf("addons before the upgrade: %s", before)
	}
	// The lab's package installer, failing for the kubelet at the new
	// version only: kubeadm's package and the rollback's installs go
	// through.
	failing := `case " {packages} " in *" kubelet "*) if [ {version} = ` + metalUpgradeTo + ` ]; then echo "hamaster test: the kubelet package of {version} does not install" >&2; exit 1; fi;; esac; ` + metallab.InstallCommand
	cmd, out := cli.command([]string{"HAMASTER_KUBEADM_INSTALL_COMMAND=" + failing},
		"rolling-upgrade", "--version", metalUpgradeTo, "--allow-downtime", "--drain-grace", "2s", "--log-level", "info", "--yes")
	start := time.Now()
	err := cmd.Run()
	t.Logf("rolling-upgrade failing after kubeadm's addon phase: %v (%s)", err, time.Since(start).Round(100*time.Millisecond))
	o := out.String()
	switch {
	case err == nil:
		t.Fatalf("rolling-upgrade succeeded with a kubelet package that does not install:\n%s", o)
	case !strings.Contains(o, "does not install") || (!strings.Contains(o, "rolling it back") && !strings.Contains(o, "rolled back")):
		t.Errorf("rolling-upgrade's output names neither the failure nor the rollback:\n%s", o)
	case !strings.Contains(o, "addon restored") || !strings.Contains(o, "kube-system/daemonset/kube-proxy"):
		t.Errorf("the rollback did not restore kube-proxy's DaemonSet (kubeadm's addon phase did not run, or the restore did not):\n%s", o)
	}
	if after := addons(); after != before {
		t.Errorf("addons after the rollback:\n%s\nwant as before the upgrade:\n%s", after, before)
	}
	for what, cmd := range map[string]string{
		"kubeadm":                          "kubeadm version -o short",
		"kubelet":                          "kubelet --version | awk '{print $2}'",
		"the apiserver's manifest":         "sed -n 's#.*image: .*/kube-apiserver:##p' /etc/kubernetes/manifests/kube-apiserver.yaml",
		"kubeadm-config kubernetesVersion": kubectl + "-n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' | sed -n 's/^kubernetesVersion: //p'",
	} {
		if got := cli.must(h1, cmd); got != metalVersion {
			t.Errorf("%s after the rollback: %q, want %s", what, got, metalVersion)
		}
	}
	if left := cli.must(h1, "ls -d /var/lib/hamaster/upgrade-backup* /var/lib/hamaster/restore-*.json 2>/dev/null; true"); left != "" {
		t.Errorf("on %s after the rollback, the backup or a restore's file is left: %s", h1.Name, left)
	}
	if t.Failed() {
		t.Logf("rolling-upgrade's output:\n%s", o)
	}
}

func modTime(path string) time.Time {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}
