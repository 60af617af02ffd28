//go:build realapiserver

// The real-apiserver tier ('make test-real'): the real kubeadm of each
// pinned version, from HAMASTER_REAL_APISERVER_DIR/<version>/kubeadm.

package cri_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/cri"
)

// refuse resolves every image but those containing one of its strings.
type refuse []string

func (r refuse) Resolve(image string) (uint64, error) {
	for _, s := range r {
		if strings.Contains(image, s) {
			return 0, errors.New("not built here")
		}
	}
	return 1 << 20, nil
}

// The real kubeadm pulls its images through the endpoint, as its
// preflight does (`kubeadm config images pull` is the same
// PullImagesInParallel), and fails naming the image the host cannot run.
func TestRealAPIServerKubeadmPullsThroughTheEndpoint(t *testing.T) {
	dir := os.Getenv("HAMASTER_REAL_APISERVER_DIR")
	if dir == "" {
		t.Fatal("HAMASTER_REAL_APISERVER_DIR is not set: run the real-apiserver tier with 'make test-real' (it builds the binaries first)")
	}
	for _, version := range []string{"v1.33.13", "v1.34.4"} {
		for _, tc := range []struct {
			name   string
			images refuse
			fail   string
		}{
			{name: "every image", images: nil},
			{name: "no etcd", images: refuse{"/etcd:"}, fail: "etcd"},
		} {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				sock := filepath.Join(t.TempDir(), "containerd.sock")
				s, err := cri.Listen(cri.Config{Socket: sock, Pods: &fakePods{}, Images: tc.images})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, filepath.Join(dir, version, "kubeadm"), "config", "images", "pull",
					"--kubernetes-version", version, "--cri-socket", "unix://"+sock).CombinedOutput()
				if tc.fail == "" {
					if err != nil {
						t.Fatalf("kubeadm config images pull: %v\n%s", err, out)
					}
					for _, img := range []string{"kube-apiserver:" + version, "kube-controller-manager:" + version, "kube-scheduler:" + version, "etcd:", "pause:", "coredns"} {
						if !strings.Contains(string(out), "[config/images] Pulled") || !strings.Contains(string(out), img) {
							t.Errorf("kubeadm did not pull %s:\n%s", img, out)
						}
					}
					return
				}
				if err == nil || !strings.Contains(string(out), tc.fail) {
					t.Fatalf("kubeadm config images pull without %s: %v\n%s", tc.fail, err, out)
				}
			})
		}
	}
}
