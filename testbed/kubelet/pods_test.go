package kubelet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hamaster/hamaster/internal/wait"
)

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := wait.Until(ctx, 20*time.Millisecond, what, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("after %s: %v", timeout, err)
	}
}

// fakeBinDir makes <dir>/v1.0.0/kube-scheduler, a script that sleeps.
func fakeBinDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v1.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "v1.0.0", "kube-scheduler"), []byte("#!/bin/sh\necho started \"$@\"\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func schedulerPod(t *testing.T, probeURL string, flag string) StaticPod {
	t.Helper()
	u, err := net.ResolveTCPAddr("tcp", probeURL)
	if err != nil {
		t.Fatal(err)
	}
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
  labels: {component: kube-scheduler}
spec:
  terminationGracePeriodSeconds: 5
  hostNetwork: true
  containers:
  - name: kube-scheduler
    image: registry.k8s.io/kube-scheduler:v1.0.0
    command: [kube-scheduler, %s]
    startupProbe:
      httpGet: {host: 127.0.0.1, path: /livez, port: %d, scheme: HTTP}
      periodSeconds: 1
`, flag, u.Port)
	sp, err := ParseStaticPod([]byte(pod), "/m/kube-scheduler.yaml", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func TestPodManagerRunsRestartsAndReplaces(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	probeAddr := srv.Listener.Addr().String()

	logs := t.TempDir()
	pm := newPodManager(Resolver{BinDir: fakeBinDir(t)}, logs, "127.0.0.1", slog.New(slog.NewTextHandler(io.Discard, nil)), func() {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer pm.stopAll()

	state := func() podState {
		s := pm.states()
		if len(s) != 1 {
			t.Fatalf("states = %d pods, want 1", len(s))
		}
		return s[0]
	}
	pid := func(s podState) int {
		if cs := s.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Running != nil {
			n, _ := strconv.Atoi(cs[0].ContainerID[len("process://"):])
			return n
		}
		return 0
	}
	ready := func(s podState) bool {
		for _, c := range s.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}

	v1 := schedulerPod(t, probeAddr, "--v=1")
	pm.sync(ctx, []StaticPod{v1})
	waitFor(t, 10*time.Second, "phase Running", func() bool { return state().Status.Phase == corev1.PodRunning })
	if ready(state()) {
		t.Fatal("Ready before the startup probe passed")
	}
	healthy.Store(true)
	waitFor(t, 10*time.Second, "Ready", func() bool { return ready(state()) })

	// A killed process is restarted, and counted.
	first := pid(state())
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the restart", func() bool {
		s := state()
		return pid(s) != 0 && pid(s) != first && s.Status.ContainerStatuses[0].RestartCount == 1
	})
	if lt := state().Status.ContainerStatuses[0].LastTerminationState.Terminated; lt == nil || lt.ExitCode != 128+9 {
		t.Errorf("last termination = %+v, want exit code 137", lt)
	}

	// The same manifest again changes nothing.
	second := pid(state())
	pm.sync(ctx, []StaticPod{v1})
	if p := pid(state()); p != second {
		t.Fatalf("pid %d → %d on an unchanged manifest", second, p)
	}

	// A changed manifest: old process stopped before the new one starts.
	v2 := schedulerPod(t, probeAddr, "--v=2")
	pm.sync(ctx, []StaticPod{v2})
	if alive(second) {
		t.Fatalf("old process %d still alive after the manifest changed", second)
	}
	waitFor(t, 10*time.Second, "the new pod running", func() bool { s := state(); return s.Hash == v2.Hash && pid(s) != 0 })
	third := pid(state())
	log := filepath.Join(logs, "kube-system_kube-scheduler-host-a_"+v2.Hash, "kube-scheduler", "0.log")
	waitFor(t, 10*time.Second, "the new pod's log", func() bool {
		b, _ := os.ReadFile(log)
		return string(b) == "started --v=2\n"
	})

	// kubeadm reset through the runtime endpoint (ListPodSandbox,
	// StopPodSandbox, RemovePodSandbox): the pod stops and is not started
	// again while its manifest stays.
	rp := runtimePods{pm}
	l := rp.List()
	if len(l) != 1 || l[0].ID != v2.Hash || !l[0].Ready || l[0].Labels["io.kubernetes.pod.name"] != state().Pod.Name || l[0].Labels["component"] != "kube-scheduler" {
		t.Fatalf("runtime pods = %+v", l)
	}
	if err := rp.Stop(ctx, l[0].ID); err != nil {
		t.Fatal(err)
	}
	if alive(third) {
		t.Fatalf("process %d alive after StopPodSandbox", third)
	}
	if l := rp.List(); len(l) != 1 || l[0].Ready {
		t.Fatalf("runtime pods after stop = %+v, want one not ready", l)
	}
	if err := rp.Remove(ctx, l[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := rp.Remove(ctx, "unknown"); err != nil {
		t.Fatal(err)
	}
	pm.sync(ctx, []StaticPod{v2})
	if l := rp.List(); len(l) != 0 || pid(state()) != 0 {
		t.Fatalf("after RemovePodSandbox: runtime pods %+v, pid %d", l, pid(state()))
	}

	// A removed manifest stops its pod.
	pm.sync(ctx, nil)
	if alive(third) || len(pm.states()) != 0 {
		t.Fatalf("pod still there after its manifest was removed (pid %d alive: %v)", third, alive(third))
	}
}

func TestPodStatusCannotRun(t *testing.T) {
	sp, err := ParseStaticPod([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: busybox, command: [no-such-command-on-this-host]}]\n"), "/m/x.yaml", "n")
	if err != nil {
		t.Fatal(err)
	}
	pm := newPodManager(Resolver{}, t.TempDir(), "10.0.0.2", slog.New(slog.NewTextHandler(io.Discard, nil)), func() {})
	pm.sync(context.Background(), []StaticPod{sp})
	defer pm.stopAll()
	s := pm.states()[0].Status
	if s.Phase != corev1.PodPending || s.Reason != "StandInCannotRun" || s.HostIP != "10.0.0.2" {
		t.Errorf("status = %+v", s)
	}
}

func TestHTTPProbeNamedPortAndHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.Header.Get("X-Probe") != "1" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	c := corev1.Container{Ports: []corev1.ContainerPort{{Name: "probe-port", ContainerPort: int32(p)}}}
	g := &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("probe-port"), HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}}}
	if err := httpProbe(context.Background(), srv.Client(), g, c, "127.0.0.1"); err != nil {
		t.Errorf("probe: %v", err)
	}
	g.Path = "/livez"
	if err := httpProbe(context.Background(), srv.Client(), g, c, "127.0.0.1"); err == nil {
		t.Error("probe of a 404 passed")
	}
	g.Port = intstr.FromString("nope")
	if err := httpProbe(context.Background(), srv.Client(), g, c, "127.0.0.1"); err == nil {
		t.Error("probe of an unknown named port passed")
	}
}

func TestLivenessProbeRestartsContainer(t *testing.T) {
	var live atomic.Bool
	var oks, fails atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !live.Load() {
			fails.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		oks.Add(1)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	sp, err := ParseStaticPod([]byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: kube-scheduler, namespace: kube-system}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: s
    image: registry.k8s.io/kube-scheduler:v1.0.0
    command: [kube-scheduler]
    livenessProbe:
      httpGet: {host: 127.0.0.1, path: /livez, port: %s}
      periodSeconds: 1
      failureThreshold: 2
`, port)), "/m/s.yaml", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	pm := newPodManager(Resolver{BinDir: fakeBinDir(t)}, t.TempDir(), "127.0.0.1", slog.New(slog.NewTextHandler(io.Discard, nil)), func() {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer pm.stopAll()
	pm.sync(ctx, []StaticPod{sp})
	status := func() corev1.ContainerStatus { return pm.states()[0].Status.ContainerStatuses[0] }

	// Failing from the start: never armed, never restarted.
	waitFor(t, 10*time.Second, "3 failed liveness probes", func() bool { return fails.Load() >= 3 })
	if r := status().RestartCount; r != 0 {
		t.Fatalf("restarted %d times by a liveness probe that never passed", r)
	}
	// Passes, then fails twice: restarted.
	live.Store(true)
	waitFor(t, 10*time.Second, "a passed liveness probe", func() bool { return oks.Load() >= 1 })
	live.Store(false)
	waitFor(t, 15*time.Second, "the restart after the liveness probe failed", func() bool {
		s := status()
		return s.RestartCount == 1 && s.State.Running != nil
	})
}
