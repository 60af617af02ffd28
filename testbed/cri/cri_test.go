package cri_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/hamaster/hamaster/testbed/cri"
)

// fakePods is the kubelet's side: pods that stop and go when asked.
type fakePods struct {
	mu      sync.Mutex
	pods    []cri.Pod
	stopped []string
}

func (f *fakePods) List() []cri.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pods)
}

func (f *fakePods) Stop(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, id)
	for i := range f.pods {
		if f.pods[i].ID == id {
			f.pods[i].Ready = false
		}
	}
	return nil
}

func (f *fakePods) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = slices.DeleteFunc(f.pods, func(p cri.Pod) bool { return p.ID == id })
	return nil
}

// binaries resolves the images of versions it has, as the test bed's
// kubelet does with its built binaries.
type binaries map[string]bool

func (b binaries) Resolve(image string) (uint64, error) {
	_, tag, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	if !b[tag] {
		return 0, errors.New("no binary for " + tag)
	}
	return 1 << 20, nil
}

func start(t *testing.T, pods cri.Pods) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	s, err := cri.Listen(cri.Config{Socket: sock, SandboxImage: "registry.k8s.io/pause:3.10", Pods: pods, Images: binaries{"v1.33.13": true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return "unix://" + sock
}

// The calls kubeadm's CRIRuntime makes, through the CRI client it uses
// (k8s.io/cri-client), answered as kubeadm expects.
func TestKubeadmCalls(t *testing.T) {
	t.Parallel()
	pods := &fakePods{pods: []cri.Pod{
		{ID: "a", Name: "kube-apiserver-m0", Namespace: "kube-system", Ready: true, Labels: map[string]string{"component": "kube-apiserver"}},
		{ID: "b", Name: "etcd-m0", Namespace: "kube-system", Ready: true, Labels: map[string]string{"component": "etcd"}},
	}}
	ep := start(t, pods)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeServiceBuilder().WithEndpoint(ep).WithConnectionTimeout(10 * time.Second).Build(ctx)
	if err != nil {
		t.Fatalf("runtime service: %v", err)
	}
	is, err := criclient.NewRemoteImageServiceBuilder().WithEndpoint(ep).WithConnectionTimeout(10 * time.Second).Build(ctx)
	if err != nil {
		t.Fatalf("image service: %v", err)
	}

	// preflight CRI: IsRunning reads RuntimeReady; SandboxImage reads
	// the verbose Info["config"].
	st, err := rs.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range st.GetStatus().GetConditions() {
		ready = ready || (c.GetType() == runtimeapi.RuntimeReady && c.GetStatus())
	}
	if !ready || !strings.Contains(st.GetInfo()["config"], `"sandboxImage":"registry.k8s.io/pause:3.10"`) {
		t.Errorf("Status = %v", st)
	}

	// preflight ImagePull: absent, pulled, present; a tag with no binary
	// is refused as a registry refuses it.
	img := &runtimeapi.ImageSpec{Image: "registry.k8s.io/kube-apiserver:v1.33.13"}
	if s, err := is.ImageStatus(ctx, img, false); err != nil || s.GetImage() != nil {
		t.Errorf("ImageStatus before pull = %v, %v; want absent", s, err)
	}
	if _, err := is.PullImage(ctx, img, nil, nil); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	if s, err := is.ImageStatus(ctx, img, false); err != nil || s.GetImage() == nil {
		t.Errorf("ImageStatus after pull = %v, %v; want present", s, err)
	}
	if _, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "registry.k8s.io/kube-apiserver:v9.9.9"}, nil, nil); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("PullImage of a version without binaries = %v; want NotFound", err)
	}

	// reset's cleanup-node: list, stop, remove every sandbox.
	list, err := rs.ListPodSandbox(ctx, nil)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListPodSandbox = %v, %v", list, err)
	}
	only, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"component": "etcd"}})
	if err != nil || len(only) != 1 || only[0].GetId() != "b" {
		t.Errorf("ListPodSandbox(component=etcd) = %v, %v", only, err)
	}
	for _, p := range list {
		if err := rs.StopPodSandbox(ctx, p.GetId()); err != nil {
			t.Fatal(err)
		}
		if err := rs.RemovePodSandbox(ctx, p.GetId()); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := rs.ListPodSandbox(ctx, nil); err != nil || len(left) != 0 {
		t.Errorf("after reset: %v, %v", left, err)
	}
	if !slices.Equal(pods.stopped, []string{"a", "b"}) {
		t.Errorf("stopped %v", pods.stopped)
	}
}

func TestListenRequires(t *testing.T) {
	t.Parallel()
	if _, err := cri.Listen(cri.Config{Socket: filepath.Join(t.TempDir(), "s")}); err == nil {
		t.Error("no Pods/Images: no error")
	}
}
