//go:build metallab

package metallab_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const kubeadmVersion = "v1.33.13"

// adminClient is a client of the cluster from the lab's admin.conf.
func adminClient(t *testing.T, lab *metallab.Lab) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", lab.AdminConfFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitNodesReady waits until each named Node is Ready with the kubelet
// version, and its control plane's mirror pods Running.
func waitNodesReady(ctx context.Context, t *testing.T, c kubernetes.Interface, version string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		err := wait.Until(ctx, 500*time.Millisecond, "Node "+n+" Ready with its mirror pods Running", func() (bool, error) {
			node, err := c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ready := false
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			if !ready || node.Status.NodeInfo.KubeletVersion != version {
				return false, nil
			}
			for _, comp := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				p, err := c.CoreV1().Pods("kube-system").Get(ctx, comp+"-"+n, metav1.GetOptions{})
				if err != nil || p.Status.Phase != corev1.PodRunning {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The real kubeadm init of host-1, preflight and all, on a lab host
// prepared as kubeadm's install page asks, with the test bed's kubelet
// (and its CRI) installed as the kubelet package.
func TestKubeadmInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kubeletProgram, binDir := metallabtest.Kubeadm(t, kubeadmVersion)
	lab := metallabtest.StartWith(ctx, t, metallab.Options{Hosts: 1, Kubelet: kubeletProgram, BinDir: binDir})
	h := lab.Hosts[0]
	if err := lab.Install(ctx, h, kubeadmVersion); err != nil {
		t.Fatal(err)
	}
	took, err := lab.KubeadmInit(ctx, h, metallab.KubeadmInit{Version: kubeadmVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm init %s on %s: %v", kubeadmVersion, h.Name, took.Round(time.Millisecond))

	c := adminClient(t, lab)
	start := time.Now()
	waitNodesReady(ctx, t, c, kubeadmVersion, h.Name)
	t.Logf("Node %s Ready, mirror pods Running %v after init", h.Name, time.Since(start).Round(time.Millisecond))

	out, err := exec.CommandContext(ctx, filepath.Join(binDir, kubeadmVersion, "kubectl"), "--kubeconfig", lab.AdminConfFile, "get", "--raw", "/readyz").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("kubectl get --raw /readyz: %v: %s", err, out)
	}
	if want := metallab.APIServer(h, ""); !strings.Contains(readFile(t, lab.AdminConfFile), "server: "+want) {
		t.Errorf("admin.conf does not point at %s", want)
	}
	if env := readFile(t, lab.EnvFile); !strings.Contains(env, "export KUBECONFIG="+lab.AdminConfFile+"\n") {
		t.Errorf("hamaster.env lacks KUBECONFIG:\n%s", env)
	}
	log := readFile(t, filepath.Join(h.Dir, metallab.KubeadmInitLog))
	for _, want := range []string{"[preflight] Running pre-flight checks", "Your Kubernetes control-plane has initialized successfully!"} {
		if !strings.Contains(log, want) {
			t.Errorf("kubeadm init's output lacks %q", want)
		}
	}
	if strings.Contains(log, "[WARNING") {
		t.Logf("kubeadm init's warnings:\n%s", grepLines(log, "[WARNING"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
