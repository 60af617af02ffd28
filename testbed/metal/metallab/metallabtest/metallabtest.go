// Package metallabtest starts a metallab lab for a test: the machine's
// prerequisites checked first (root, ip, sshd, and what the test names),
// everything removed when the test ends, and checked removed.
package metallabtest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/metal/metallab"
)

// Need fails the test under CI and skips it elsewhere when the machine
// cannot run a lab (not root: network namespaces and mounts), and fails it
// when a binary is missing: the lab's own (ip, unshare, sshd) and any of
// bins (absolute paths such as /usr/sbin/keepalived), which
// scripts/test-prereqs.sh installs.
func Need(t testing.TB, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the metal lab needs root; CI runs as root")
		}
		t.Skip("the metal lab needs root (network namespaces, mounts)")
	}
	if err := metallab.Preflight(); err != nil {
		t.Fatalf("%v (scripts/test-prereqs.sh installs what the tests need)", err)
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is missing: scripts/test-prereqs.sh installs it (%v)", b, err)
		}
	}
}

// Start checks Need, builds a lab of n hosts in a temporary directory
// and registers its removal, then checks that no namespace of it is left.
func Start(ctx context.Context, t testing.TB, n int, bins ...string) *metallab.Lab {
	t.Helper()
	return StartWith(ctx, t, metallab.Options{Hosts: n}, bins...)
}

// StartWith is Start with o's other fields (Kubelet, BinDir: see
// Kubeadm); o.Dir and o.Logger are the test's.
func StartWith(ctx context.Context, t testing.TB, o metallab.Options, bins ...string) *metallab.Lab {
	t.Helper()
	Need(t, bins...)
	dir := filepath.Join(t.TempDir(), "lab")
	o.Dir, o.Logger = dir, slog.New(slog.NewTextHandler(testWriter{t}, nil))
	lab, err := metallab.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// .ci/run's where_failed prints the lines before this
			// marker: the test's last words, not the pages below.
			t.Log("the lab's logs follow (the test failed above)")
			for _, h := range lab.Hosts {
				t.Logf("%s sshd log:\n%s", h.Name, h.LogTail())
				for _, f := range []string{"kubelet.log", metallab.KubeadmInitLog, metallab.KubeadmJoinWorkerLog} {
					if b, err := os.ReadFile(filepath.Join(h.Dir, f)); err == nil {
						if len(b) > 6000 {
							b = b[len(b)-6000:]
						}
						t.Logf("%s %s (end):\n%s", h.Name, f, b)
					}
				}
			}
		}
		// t.Context() has ended by now.
		if err := lab.Close(context.Background()); err != nil {
			t.Error(err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && (f[0] == lab.Switch() || strings.HasPrefix(f[0], strings.TrimSuffix(lab.Switch(), "sw"))) {
				t.Errorf("namespace %s left", f[0])
			}
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s left", dir)
		}
	})
	return lab
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// EnvRealBinaries names the directory of the real Kubernetes binaries
// (<dir>/<version>/kubeadm, ...), as for make test-real; unset, the
// default cache of make kube-apiserver.
const EnvRealBinaries = "HAMASTER_REAL_APISERVER_DIR"

// Kubeadm returns what a lab needs to install kubeadm hosts
// (Options.Kubelet, Options.BinDir): hamaster-kubelet built into the
// test's temporary directory, and the real binaries' directory, checked
// to hold kubeadm, kubectl and the control plane's binaries of each
// version (the test fails saying how to build them when not).
func Kubeadm(t testing.TB, versions ...string) (kubeletProgram, binDir string) {
	t.Helper()
	binDir = os.Getenv(EnvRealBinaries)
	if binDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		binDir = filepath.Join(home, ".cache", "hamaster", "kube-apiserver")
	}
	for _, v := range versions {
		for _, b := range []string{"kubeadm", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if _, err := os.Stat(filepath.Join(binDir, v, b)); err != nil {
				t.Fatalf("%s %s: %v: build the real binaries first with 'make kube-apiserver' (make test-metal does), or set %s", b, v, err, EnvRealBinaries)
			}
		}
	}
	kubeletProgram = filepath.Join(t.TempDir(), "hamaster-kubelet")
	out, err := exec.Command("go", "build", "-o", kubeletProgram, "github.com/hamaster/hamaster/cmd/hamaster-kubelet").CombinedOutput()
	if err != nil {
		t.Fatalf("build hamaster-kubelet: %v\n%s", err, out)
	}
	return kubeletProgram, binDir
}
