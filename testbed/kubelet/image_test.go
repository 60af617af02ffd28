package kubelet

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hamaster/hamaster/errkind"
)

func TestResolveKubeadmManifests(t *testing.T) {
	r := Resolver{BinDir: "/cache/kube-apiserver", Self: "/usr/bin/hamaster-kubelet"}
	tests := []struct {
		file     string
		wantPath string
		wantArgs []string // the first few
	}{
		{"etcd.yaml", "/usr/bin/hamaster-kubelet", []string{"etcd", "--advertise-client-urls=https://10.0.0.2:2379", "--cert-file=/etc/kubernetes/pki/etcd/server.crt"}},
		{"kube-apiserver.yaml", "/cache/kube-apiserver/v1.33.13/kube-apiserver", []string{"--advertise-address=10.0.0.2", "--authorization-mode=Node,RBAC"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			sp, err := ParseStaticPod(readTestdata(t, tc.file), "/m/"+tc.file, "host-a")
			if err != nil {
				t.Fatal(err)
			}
			ps, err := r.Resolve(sp.Pod, sp.Pod.Spec.Containers[0])
			if err != nil {
				t.Fatal(err)
			}
			if ps.Path != tc.wantPath || len(ps.Args) < len(tc.wantArgs) || !reflect.DeepEqual(ps.Args[:len(tc.wantArgs)], tc.wantArgs) {
				t.Errorf("Resolve = %s %q, want %s %q...", ps.Path, ps.Args, tc.wantPath, tc.wantArgs)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	r := Resolver{BinDir: "/bins", Self: "/self", LookPath: func(f string) (string, error) {
		if f == "keepalived" {
			return "/usr/sbin/keepalived", nil
		}
		return "", exec.ErrNotFound
	}}
	hostPathPod := func(hostPath string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPath}}}}}}
	}
	mount := []corev1.VolumeMount{{Name: "v", MountPath: "/etc/kubernetes/pki"}}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		c        corev1.Container
		wantPath string
		wantArgs []string
		wantEnv  []string
		wantErr  bool
	}{
		{name: "scheduler with args and env", pod: &corev1.Pod{},
			c:        corev1.Container{Name: "s", Image: "registry.k8s.io/kube-scheduler:v1.34.4", Command: []string{"kube-scheduler"}, Args: []string{"--v=2"}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
			wantPath: "/bins/v1.34.4/kube-scheduler", wantArgs: []string{"--v=2"}, wantEnv: []string{"A=b"}},
		{name: "custom repository and digest", pod: &corev1.Pod{},
			c:        corev1.Container{Name: "c", Image: "my.registry:5000/k8s/kube-controller-manager:v1.33.13@sha256:abc", Command: []string{"kube-controller-manager", "--x"}},
			wantPath: "/bins/v1.33.13/kube-controller-manager", wantArgs: []string{"--x"}},
		{name: "etcd 3.6 image", pod: &corev1.Pod{},
			c:        corev1.Container{Name: "e", Image: "registry.k8s.io/etcd:3.6.4-0", Command: []string{"etcd", "--name=a"}},
			wantPath: "/self", wantArgs: []string{"etcd", "--name=a"}},
		{name: "same host and mount path", pod: hostPathPod("/etc/kubernetes/pki/"),
			c:        corev1.Container{Name: "a", Image: "registry.k8s.io/kube-apiserver:v1.33.13", Command: []string{"kube-apiserver"}, VolumeMounts: mount},
			wantPath: "/bins/v1.33.13/kube-apiserver", wantArgs: []string{}},
		{name: "mount path differs", pod: hostPathPod("/srv/pki"), wantErr: true,
			c: corev1.Container{Name: "a", Image: "registry.k8s.io/kube-apiserver:v1.33.13", Command: []string{"kube-apiserver"}, VolumeMounts: mount}},
		{name: "not a hostPath volume", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "a", Image: "registry.k8s.io/kube-apiserver:v1.33.13", Command: []string{"kube-apiserver"}, VolumeMounts: mount}},
		{name: "unknown image", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "x", Image: "registry.k8s.io/coredns/coredns:v1.12.0", Command: []string{"coredns"}}},
		{name: "generic image: the host's command", pod: &corev1.Pod{},
			c:        corev1.Container{Name: "k", Image: "osixia/keepalived:2.0.20", Command: []string{"keepalived"}, Args: []string{"--dont-fork"}},
			wantPath: "/usr/sbin/keepalived", wantArgs: []string{"--dont-fork"}},
		{name: "generic image: command not on the host", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "h", Image: "haproxy:2.8", Command: []string{"haproxy"}}},
		{name: "generic image without command", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "h", Image: "haproxy:2.8", Args: []string{"-f", "/x"}}},
		{name: "pause is never run", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "p", Image: "registry.k8s.io/pause:3.10", Command: []string{"keepalived"}}},
		{name: "no command", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "x", Image: "registry.k8s.io/kube-apiserver:v1.33.13"}},
		{name: "tag not a version", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "x", Image: "registry.k8s.io/kube-apiserver:latest", Command: []string{"kube-apiserver"}}},
		{name: "env from a secret", pod: &corev1.Pod{}, wantErr: true,
			c: corev1.Container{Name: "x", Image: "registry.k8s.io/kube-apiserver:v1.33.13", Command: []string{"kube-apiserver"}, Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := r.Resolve(tc.pod, tc.c)
			if tc.wantErr {
				if !errors.Is(err, errkind.InvalidArgument) {
					t.Fatalf("Resolve = %+v, %v; want an InvalidArgument error", ps, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ps.Path != tc.wantPath || !reflect.DeepEqual(ps.Args, tc.wantArgs) || !reflect.DeepEqual(ps.Env, tc.wantEnv) {
				t.Errorf("Resolve = %s %q env %q, want %s %q env %q", ps.Path, ps.Args, ps.Env, tc.wantPath, tc.wantArgs, tc.wantEnv)
			}
		})
	}
}

func TestResolveImage(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"v1.33.13/kube-apiserver", "v1.33.13/kube-controller-manager", "v1.33.13/kube-scheduler", "self"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("binary"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := Resolver{BinDir: dir, Self: filepath.Join(dir, "self")}
	for _, tc := range []struct {
		image string
		ok    bool
	}{
		{"registry.k8s.io/kube-apiserver:v1.33.13", true},
		{"registry.k8s.io/kube-scheduler:v1.33.13", true},
		{"registry.k8s.io/kube-proxy:v1.33.13", true},
		{"registry.k8s.io/etcd:3.5.24-0", true},
		{"registry.k8s.io/pause:3.10", true},
		{"registry.k8s.io/coredns/coredns:v1.12.0", true},
		{"registry.k8s.io/kube-apiserver:v1.34.4", false}, // no binaries
		{"registry.k8s.io/kube-proxy:v1.34.4", false},
		{"registry.k8s.io/kube-apiserver:latest", false},
		{"haproxy:2.8", false},
	} {
		_, err := r.ResolveImage(tc.image)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errkind.NotFound)) {
			t.Errorf("ResolveImage(%s) = %v, want ok %v (else NotFound)", tc.image, err, tc.ok)
		}
	}
}

// An etcd tag with an executable EtcdOverrideDir/<tag> in BinDir runs
// it with the manifest's flags; other tags, a file that is not
// executable, and a tag that is a path run Self's etcd.
func TestResolveEtcdOverride(t *testing.T) {
	bin := t.TempDir()
	dir := filepath.Join(bin, EtcdOverrideDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "3.6.5-0"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "3.6.6-0"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Resolver{BinDir: bin, Self: "/self"}
	tests := []struct {
		image, wantPath string
		wantArgs        []string
	}{
		{"registry.k8s.io/etcd:3.6.5-0", filepath.Join(dir, "3.6.5-0"), []string{"--data-dir=/var/lib/etcd"}},
		{"registry.k8s.io/etcd:3.5.24-0", "/self", []string{EtcdSubcommand, "--data-dir=/var/lib/etcd"}},
		{"registry.k8s.io/etcd:3.6.6-0", "/self", []string{EtcdSubcommand, "--data-dir=/var/lib/etcd"}},
		{"registry.k8s.io/etcd", "/self", []string{EtcdSubcommand, "--data-dir=/var/lib/etcd"}},
		{"registry.k8s.io/etcd:..", "/self", []string{EtcdSubcommand, "--data-dir=/var/lib/etcd"}},
	}
	for _, tc := range tests {
		c := corev1.Container{Name: "etcd", Image: tc.image, Command: []string{"etcd", "--data-dir=/var/lib/etcd"}}
		ps, err := r.Resolve(&corev1.Pod{}, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.image, err)
		}
		if ps.Path != tc.wantPath || !reflect.DeepEqual(ps.Args, tc.wantArgs) {
			t.Errorf("%s: Resolve = %s %q, want %s %q", tc.image, ps.Path, ps.Args, tc.wantPath, tc.wantArgs)
		}
	}
}
