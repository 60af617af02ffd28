//go:build metallab

// The metal lab's tier ('make test-metal', as root): the real CLI on the
// metal provider's hosts, against masters built by the real kubeadm.

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/probeload"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
	"github.com/hamaster/hamaster/workflows"
)

const metalVersion = "v1.33.13"

// labEnv reads the HAMASTER_* variables metallab writes to hamaster.env
// ("export K=V" lines), as an operator sources it.
func labEnv(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kv, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
				v = v[1 : len(v)-1] // the file quotes values with spaces
			}
			env = append(env, k+"="+v)
		}
	}
	return env
}

// TestMetalKubeadmEndToEnd is issue 23's and 24's walk with the real CLI:
// a single kubeadm master (kubeadm init, no controlPlaneEndpoint) →
// add-replica --host (the VIP brought up, the cluster converted to HA on
// it, the host joined; killed after the conversion and resumed) →
// add-replica (the first free host; killed during kubeadm join and
// resumed) with load on the old address and the VIP throughout: 0
// failed → remove-replica of the VIP's holder (a planned handoff; killed
// after the member's removal and resumed) and of another → one master
// left, no member or Node of the others, the freed hosts clean.
func TestMetalKubeadmEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	kubeletProgram, binDir := metallabtest.Kubeadm(t, metalVersion)
	lab := metallabtest.StartWith(ctx, t, metallab.Options{Hosts: 3, Kubelet: kubeletProgram, BinDir: binDir})
	for _, h := range lab.Hosts {
		if err := lab.Install(ctx, h, metalVersion); err != nil {
			t.Fatal(err)
		}
	}
	h1, h2, h3 := lab.Hosts[0], lab.Hosts[1], lab.Hosts[2]
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: metalVersion}); err != nil {
		t.Fatal(err)
	}
	sh := func(h *metallab.Host, cmd string) (string, error) {
		c, err := lab.Dial(ctx, h)
		if err != nil {
			return "", err
		}
		defer c.Close()
		out, stderr, err := c.Run(ctx, cmd)
		if err != nil {
			return string(out), fmt.Errorf("%s on %s: %w: %s", cmd, h.Name, err, stderr)
		}
		return strings.TrimSpace(string(out)), nil
	}
	must := func(h *metallab.Host, cmd string) string {
		t.Helper()
		out, err := sh(h, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	caPEM := must(h1, "cat /etc/kubernetes/pki/ca.crt")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("master 0's ca.crt holds no certificate")
	}
	// The old address is verified for its IP, the VIP for the VIP: each
	// name must be in the apiserver's certificate.
	tlsFor := func() *tls.Config { return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12} }

	env := append(os.Environ(), labEnv(t, lab.EnvFile)...)
	env = append(env, "HAMASTER_STATE_DIR="+t.TempDir(), "HAMASTER_CLUSTER=lab", "HAMASTER_FLAVOR=kubeadm")
	bin := localtest.HamasterBinary(t)
	// command is hamaster with args, extra environment last.
	command := func(extra []string, args ...string) (*exec.Cmd, *strings.Builder) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(slices.Clone(env), extra...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out
	}
	hm := func(args ...string) string {
		t.Helper()
		cmd, out := command(nil, args...)
		start := time.Now()
		err := cmd.Run()
		t.Logf("hamaster %s: %v (%s)", strings.Join(args, " "), err, time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			t.Fatalf("hamaster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out.String()
	}
	// crashAfter runs hamaster with args until it kills itself right
	// after step is journaled (the fault hook of the test build).
	crashAfter := func(step string, args ...string) {
		t.Helper()
		cmd, out := command([]string{"HAMASTER_FAULT_CRASH_AFTER_STEP=" + step}, args...)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
			t.Fatalf("hamaster %s with a crash after %s: %v, want killed\n%s", strings.Join(args, " "), step, err, out)
		}
		t.Logf("hamaster %s: killed after %s", strings.Join(args, " "), step)
	}

	oldAddr := fmt.Sprintf("https://%s:6443/readyz", h1.Addr)
	vipAddr := fmt.Sprintf("https://%s:8443/readyz", lab.VIP)
	oldLoad := probeload.Start(ctx, oldAddr, tlsFor(), 20*time.Millisecond)

	// Crash-resume: killed once the cluster is converted, resumed
	// without --host (the journal has it).
	crashAfter(workflows.StepConvertEndpoint, "add-replica", "--host", h2.Name, "--yes")
	hm("add-replica", "--yes")
	vipLoad := probeload.Start(ctx, vipAddr, tlsFor(), 20*time.Millisecond)
	if ep := must(h1, "kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' | grep controlPlaneEndpoint"); !strings.Contains(ep, lab.VIP.String()+":8443") {
		t.Fatalf("kubeadm-config after the conversion: %s", ep)
	}
	// The first free host (host-3), its hamaster killed while kubeadm
	// join runs there: the resumed run undoes the half join (no learner
	// survives) and joins again.
	cmd, out := command(nil, "add-replica", "--yes")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(ctx, 100*time.Millisecond, "kubeadm join on "+h3.Name, func() (bool, error) {
		out, _ := sh(h3, "pgrep -f '^kubeadm join' || true")
		return out != "", nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Logf("hamaster add-replica: killed during kubeadm join on %s", h3.Name)
	hm("add-replica", "--yes")

	var st struct {
		Replicas []struct {
			Name string `json:"name"`
		} `json:"replicas"`
	}
	// status reads every master over SSH (kubeadm's view, its CA, the
	// VIP's holder and HAProxy's view): its default 20 s is short on a
	// machine shared with other labs (seen: exceeded with 3 masters on 2
	// shared cores).
	if err := json.Unmarshal([]byte(hm("--output", "json", "status", "--timeout", "90s")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Replicas) != 3 {
		t.Fatalf("status after two adds: %+v", st)
	}
	nodes := must(h1, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -l node-role.kubernetes.io/control-plane -o name | wc -l")
	if nodes != "3" {
		t.Fatalf("control-plane Nodes after two adds: %s", nodes)
	}
	old := oldLoad.Stop()
	t.Logf("load on the old address %s through the conversion and both adds: %+v", oldAddr, old)
	if probeload.Failed(old) != 0 {
		t.Errorf("requests to the old address failed: %+v", old)
	}
	vipLoad = failoverLeg(ctx, t, lab, sh, command, tlsFor(), vipLoad)

	// The VIP's holder leaves first: a planned handoff.
	holder := ""
	for _, h := range lab.Hosts {
		if out, _ := sh(h, "ip -o addr show | grep -c ' "+lab.VIP.String()+"/' || true"); out == "1" {
			holder = h.Name
		}
	}
	if holder == "" {
		t.Fatal("no host holds the VIP")
	}
	crashAfter(workflows.StepRemoveMember, "remove-replica", "--name", holder, "--yes")
	hm("remove-replica", "--name", holder, "--yes")
	var second string
	for _, h := range []*metallab.Host{h1, h2, h3} {
		if h.Name != holder {
			second = h.Name
			break
		}
	}
	hm("remove-replica", "--name", second, "--yes")
	vip := vipLoad.Stop()
	t.Logf("load on the VIP %s through the second add and both removals: %+v", vipAddr, vip)
	// Known gap (issue 24's note): the last removal takes etcd from 2
	// voters to 1, and the surviving apiserver's /readyz reports etcd
	// not ready for a moment (0–2 kept-alive 500s seen); more than that
	// is a regression.
	if n := probeload.Failed(vip); n > 2 {
		t.Errorf("%d requests to the VIP failed: %+v", n, vip)
	}

	var last *metallab.Host
	for _, h := range lab.Hosts {
		if h.Name != holder && h.Name != second {
			last = h
		}
	}
	if n := must(last, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o name | wc -l"); n != "1" {
		t.Errorf("Nodes left: %s", n)
	}
	var end map[string]any
	if err := json.Unmarshal([]byte(hm("--output", "json", "status", "--timeout", "90s")), &end); err != nil {
		t.Fatal(err)
	}
	if ms, _ := end["members"].([]any); len(ms) != 1 || len(asSlice(end["orphans"])) != 0 || len(asSlice(end["replicas"])) != 1 {
		t.Errorf("status after the removals: members %v, orphans %v, replicas %v", end["members"], end["orphans"], end["replicas"])
	}
	for _, name := range []string{holder, second} {
		h := lab.Host(name)
		left := must(h, "find /etc/kubernetes/manifests -name '*.yaml' 2>/dev/null; ls -A /var/lib/etcd 2>/dev/null; cat /var/lib/hamaster/claim 2>/dev/null; ip -o addr show | grep -F ' "+lab.VIP.String()+"/' || true")
		if left != "" {
			t.Errorf("freed host %s keeps: %s", name, left)
		}
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
