package kubelet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/loopbacktest"
)

// TestRunWithoutAPIServer runs the kubelet before kubeadm has written its
// config and with no apiserver to reach (kubeadm init's order: the
// kubelet is started, then config.yaml and the manifests appear): it waits
// for the config, serves /healthz, runs the static pods, applies a changed
// config (another staticPodPath) and stops its pods when it ends.
func TestRunWithoutAPIServer(t *testing.T) {
	dir := t.TempDir()
	port := loopbacktest.Port(t)
	manifests1, manifests2 := filepath.Join(dir, "m1"), filepath.Join(dir, "m2")
	for _, d := range []string{manifests1, manifests2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(flag string) []byte {
		return []byte(fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler, namespace: kube-system}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  - {name: s, image: registry.k8s.io/kube-scheduler:v1.0.0, command: [kube-scheduler, %s]}\n", flag))
	}
	if err := os.WriteFile(filepath.Join(manifests1, "kube-scheduler.yaml"), pod("--one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests2, "kube-scheduler.yaml"), pod("--two"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(manifests string) []byte {
		return []byte(fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: %s\nhealthzPort: %d\npodLogsDir: %s\n", manifests, port, filepath.Join(dir, "logs")))
	}
	o := Options{
		Config: filepath.Join(dir, "config.yaml"), Kubeconfig: filepath.Join(dir, "kubelet.conf"),
		BootstrapKubeconfig: filepath.Join(dir, "bootstrap-kubelet.conf"), CertDir: filepath.Join(dir, "pki"),
		HostnameOverride: "host-a", NodeIP: "127.0.0.1", Version: "v1.33.13", BinDir: fakeBinDir(t), Self: "/nonexistent",
		// Never the default (containerd's socket): this is the machine's namespace.
		RuntimeEndpoint: filepath.Join(dir, "cri.sock"),
	}
	defer runInBackground(t, o, slog.New(slog.NewTextHandler(io.Discard, nil)), 20*time.Second, "Run did not return")()

	healthz := func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && string(b) == "ok"
	}
	if healthz() {
		t.Fatal("/healthz served before the config exists")
	}
	// The runtime endpoint is up before the config exists (kubeadm's
	// preflight runs before kubelet-start writes it).
	waitFor(t, 10*time.Second, "the runtime endpoint's socket", func() bool {
		c, err := net.Dial("unix", o.RuntimeEndpoint)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if err := os.WriteFile(o.Config, config(manifests1), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "/healthz", healthz)
	logOf := func(flag string) func() bool {
		return func() bool {
			found := false
			_ = filepath.WalkDir(filepath.Join(dir, "logs"), func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					b, _ := os.ReadFile(p)
					found = found || strings.Contains(string(b), "started "+flag)
				}
				return nil
			})
			return found
		}
	}
	waitFor(t, 10*time.Second, "the pod of the first static pod path", logOf("--one"))
	if err := os.WriteFile(o.Config, config(manifests2), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the pod of the new static pod path", logOf("--two"))
}

// runInBackground runs the kubelet as o says until the returned stop is
// called; stop fails the test when Run fails, or, with late, when it has
// not returned within bound.
func runInBackground(t *testing.T, o Options, log *slog.Logger, bound time.Duration, late string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o, log) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(bound):
			t.Error(late)
		}
	}
}
