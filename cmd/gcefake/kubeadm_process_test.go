//go:build gcekubeadm

// bin/gcefake --kubeadm-master as an operator runs it, with bin/hamaster
// against it (make test-gce-kubeadm: it needs the real binaries).

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const kubeadmVersion = "v1.33.13"

// TestGCEFakeKubeadmProcess: bin/gcefake --kubeadm-master makes master 0
// from its kubeadm image and runs kubeadm init on it; with the
// hamaster.env it writes, kubectl reaches the cluster and bin/hamaster
// (--flavor kubeadm, from the env) adds a replica (the static IP moved to
// the LB, the clone joined) and removes it; SIGTERM leaves no namespace,
// no process and no file of the fake.
func TestGCEFakeKubeadmProcess(t *testing.T) {
	metallabtest.Need(t, "nsenter")
	binDir := os.Getenv(metallabtest.EnvRealBinaries)
	if binDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		binDir = filepath.Join(home, ".cache", "hamaster", "kube-apiserver")
	}
	if _, err := os.Stat(filepath.Join(binDir, kubeadmVersion, "kubeadm")); err != nil {
		t.Fatalf("the real binaries: %v (make kube-apiserver)", err)
	}
	start := time.Now()
	bin := labcmdtest.Build(t, "cmd/gcefake", "cmd/hamaster-node", "cmd/hamaster-kubelet", "cmd/hamaster")
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	state := filepath.Join(t.TempDir(), "state")
	before := labcmdtest.Netns(t)
	ext := fmt.Sprintf("198.18.%d.0/24", 240+rand.IntN(10))
	g := startGCEFake(t, bin, state, "--kubeadm-master", "kubernetes-master", "--kubeadm-version", kubeadmVersion,
		"--kube-bin-dir", binDir, "--external-range", ext, "--op-latency", "20ms", "--log-level", "warn")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := g.awaitEnv(ctx, t, state, 8*time.Minute)
	t.Logf("kubeadm master ready after %v:\n%s", time.Since(start).Round(time.Millisecond), g.Output())
	for k, want := range map[string]string{"HAMASTER_FLAVOR": "kubeadm", "KUBECONFIG": filepath.Join(state, "admin.conf")} {
		if env[k] != want {
			t.Errorf("hamaster.env %s=%q; want %q", k, env[k], want)
		}
	}
	environ := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	sh := func(name string, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, name, args...)
		c.Env = environ
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s\ngcefake:\n%s", filepath.Base(name), strings.Join(args, " "), err, b, g.Output())
		}
		return string(b)
	}
	kubectl := filepath.Join(binDir, kubeadmVersion, "kubectl")
	if got := strings.TrimSpace(sh(kubectl, "get", "nodes", "-o", "name")); got != "node/kubernetes-master" {
		t.Fatalf("kubectl get nodes: %q", got)
	}
	hm := filepath.Join(bin, "hamaster")
	start = time.Now()
	if o := sh(hm, "add-replica", "--yes"); !strings.Contains(o, "add-replica finished") {
		t.Fatalf("add-replica:\n%s", o)
	}
	t.Logf("hamaster add-replica took %v", time.Since(start).Round(time.Millisecond))
	nodes := strings.Fields(sh(kubectl, "get", "nodes", "-o", "name"))
	var added string
	for _, n := range nodes {
		if n != "node/kubernetes-master" {
			added = strings.TrimPrefix(n, "node/")
		}
	}
	if len(nodes) != 2 || added == "" {
		t.Fatalf("Nodes after add-replica: %v", nodes)
	}
	if st := sh(hm, "status"); !strings.Contains(st, "kubeadm masters") || strings.Count(st, "running  yes") != 2 {
		t.Errorf("status after add-replica:\n%s", st)
	}
	start = time.Now()
	if o := sh(hm, "remove-replica", "--name", added, "--yes"); !strings.Contains(o, "remove-replica finished") {
		t.Fatalf("remove-replica:\n%s", o)
	}
	t.Logf("hamaster remove-replica took %v", time.Since(start).Round(time.Millisecond))
	if got := strings.TrimSpace(sh(kubectl, "get", "nodes", "-o", "name")); got != "node/kubernetes-master" {
		t.Errorf("Nodes after remove-replica: %q", got)
	}

	g.stop(t)
	for ns := range labcmdtest.Netns(t) {
		if !before[ns] && strings.HasPrefix(ns, "hm-f") {
			t.Errorf("namespace %s left", ns)
		}
	}
	if left := labcmdtest.ProcessesMentioning(bin); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	ents, _ := os.ReadDir(state)
	for _, e := range ents {
		if e.Name() != "hamaster" { // hamaster's own state directory
			t.Errorf("%s left in the state directory", e.Name())
		}
	}
}
