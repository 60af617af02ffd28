package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hamaster/hamaster/internal/ctxutil"
	"github.com/hamaster/hamaster/testbed/cri"
)

// defaultGrace is a pod's termination grace period when its spec has none
// (the API's default, 30 s).
const defaultGrace = 30 * time.Second

// podWorker runs one static pod's containers and probes it.
type podWorker struct {
	sp         StaticPod
	cancel     context.CancelFunc
	containers []*container
	startErr   error // the pod could not be started (bad image, mounts)
	started    time.Time
	// stopped and removed: stopped (removed) through the runtime
	// endpoint; kept until the manifest changes or goes.
	stopped, removed bool

	mu    sync.Mutex
	ready map[string]bool // container → its probe passed (no probe: true)
}

// podManager keeps the running pods equal to the manifests (sync) and
// tells their state (statuses).
type podManager struct {
	resolver Resolver
	logsDir  string
	hostIP   string
	log      *slog.Logger
	changed  func()

	mu   sync.Mutex
	pods map[string]*podWorker // by namespace/name
}

func newPodManager(r Resolver, logsDir, hostIP string, log *slog.Logger, changed func()) *podManager {
	return &podManager{resolver: r, logsDir: logsDir, hostIP: hostIP, log: log, changed: changed, pods: map[string]*podWorker{}}
}

// setLogsDir sets where pods started from now on log.
func (m *podManager) setLogsDir(dir string) {
	m.mu.Lock()
	m.logsDir = dir
	m.mu.Unlock()
}

// sync starts the pods that are new, restarts those whose hash changed
// (the old one stopped first, as the real kubelet kills a pod before
// starting its replacement, since both would bind the same host ports)
// and stops those whose manifest is gone.
func (m *podManager) sync(ctx context.Context, want []StaticPod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := map[string]bool{}
	for _, sp := range want {
		key := sp.FullName()
		keep[key] = true
		if w, ok := m.pods[key]; ok {
			if w.sp.Hash == sp.Hash {
				continue
			}
			m.log.Info("static pod changed; restarting it", "pod", key, "old_hash", w.sp.Hash, "hash", sp.Hash)
			m.stopLocked(key, w)
		}
		m.pods[key] = m.start(ctx, sp)
	}
	for key, w := range m.pods {
		if !keep[key] {
			m.log.Info("static pod removed; stopping it", "pod", key)
			m.stopLocked(key, w)
		}
	}
	m.changed()
}

func (m *podManager) stopLocked(key string, w *podWorker) {
	w.cancel()
	for _, c := range w.containers {
		c.wait()
	}
	delete(m.pods, key)
}

// stopAll stops every pod and waits for their processes to end.
func (m *podManager) stopAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	// All at once (each has its own grace period), etcd last: an
	// apiserver whose etcd is gone takes its whole grace period to stop.
	isEtcd := func(w *podWorker) bool {
		for _, c := range w.sp.Pod.Spec.Containers {
			if name, _ := splitImage(c.Image); name == imageEtcd {
				return true
			}
		}
		return false
	}
	for _, etcdPass := range []bool{false, true} {
		for _, w := range m.pods {
			if isEtcd(w) == etcdPass {
				w.cancel()
			}
		}
		for key, w := range m.pods {
			if isEtcd(w) == etcdPass {
				m.stopLocked(key, w)
			}
		}
	}
}

func (m *podManager) start(ctx context.Context, sp StaticPod) *podWorker {
	ctx, cancel := context.WithCancel(ctx)
	w := &podWorker{sp: sp, cancel: cancel, started: time.Now(), ready: map[string]bool{}}
	log := m.log.With("pod", sp.FullName(), "hash", sp.Hash)
	grace := defaultGrace
	if g := sp.Pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	var specs []ProcessSpec
	for _, c := range sp.Pod.Spec.Containers {
		ps, err := m.resolver.Resolve(sp.Pod, c)
		if err != nil {
			log.Error("static pod cannot run", "err", err)
			w.startErr = err
			return w
		}
		specs = append(specs, ps)
	}
	podLogs := filepath.Join(m.logsDir, fmt.Sprintf("%s_%s_%s", sp.Pod.Namespace, sp.Pod.Name, sp.Pod.UID))
	for i, ps := range specs {
		c := startContainer(ctx, ps, filepath.Join(podLogs, ps.Container), grace, log, m.changed)
		w.containers = append(w.containers, c)
		go w.probe(ctx, sp.Pod.Spec.Containers[i], c, m.hostIP, m.changed)
		go liveness(ctx, sp.Pod.Spec.Containers[i], c, m.hostIP, log)
	}
	log.Info("static pod started", "containers", len(specs))
	return w
}

// gateProbe is the probe that decides a container's readiness: its
// readiness probe, else its startup probe (kubeadm gives etcd and the
// apiserver both, the controller-manager and scheduler a startup probe
// only), else none (ready once running).
func gateProbe(c corev1.Container) *corev1.Probe {
	if c.ReadinessProbe != nil {
		return c.ReadinessProbe
	}
	return c.StartupProbe
}

// probe keeps w.ready[container] current: every second until the probe
// passes, then at the probe's period.
func (w *podWorker) probe(ctx context.Context, spec corev1.Container, c *container, hostIP string, changed func()) {
	p := gateProbe(spec)
	set := func(ok bool) {
		w.mu.Lock()
		old, had := w.ready[spec.Name]
		w.ready[spec.Name] = ok
		w.mu.Unlock()
		if !had || old != ok {
			changed()
		}
	}
	if p == nil || p.HTTPGet == nil {
		set(true) // no probe, or one the stand-in cannot run (exec, tcp, grpc)
		return
	}
	period, timeout, _, _ := probeTimings(p)
	client := probeClient(timeout)
	defer client.CloseIdleConnections()
	for {
		ok := c.state().Running && httpProbe(ctx, client, p.HTTPGet, spec, hostIP) == nil
		set(ok)
		next := time.Second
		if ok {
			next = period
		}
		if !ctxutil.Sleep(ctx, next) {
			return
		}
	}
}

// probeClient is an HTTP client for probes with timeout; the real
// kubelet's HTTPS probes do not verify the certificate
// (pkg/probe/http/request.go).
func probeClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes, as the kubelet's
		DisableKeepAlives: true,
	}}
}

// probeTimings are a probe's period, timeout, failure threshold and
// initial delay with the API's defaults (10 s, 1 s, 3, 0).
func probeTimings(p *corev1.Probe) (period, timeout time.Duration, threshold int, delay time.Duration) {
	period, timeout, threshold = 10*time.Second, time.Second, 3
	if p.PeriodSeconds > 0 {
		period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	if p.FailureThreshold > 0 {
		threshold = int(p.FailureThreshold)
	}
	return period, timeout, threshold, time.Duration(p.InitialDelaySeconds) * time.Second
}

// liveness restarts the container when its httpGet liveness probe fails
// failureThreshold times in a row, as the real kubelet's prober does. The
// real kubelet holds liveness back until the startup probe passes; the
// stand-in arms it when the liveness probe first passes in a run (kubeadm's
// startup and liveness probes ask the same endpoints), so a component
// still starting is never killed by it.
func liveness(ctx context.Context, spec corev1.Container, c *container, hostIP string, log *slog.Logger) {
	p := spec.LivenessProbe
	if p == nil || p.HTTPGet == nil {
		return
	}
	period, timeout, threshold, delay := probeTimings(p)
	client := probeClient(timeout)
	defer client.CloseIdleConnections()
	var run time.Time // StartedAt of the run being watched
	armed, failures := false, 0
	for {
		if !ctxutil.Sleep(ctx, period) {
			return
		}
		st := c.state()
		if !st.Running || time.Since(st.StartedAt) < delay {
			continue
		}
		if !st.StartedAt.Equal(run) {
			run, armed, failures = st.StartedAt, false, 0
		}
		err := httpProbe(ctx, client, p.HTTPGet, spec, hostIP)
		switch {
		case err == nil:
			armed, failures = true, 0
		case armed:
			failures++
			if failures >= threshold {
				log.Warn("liveness probe failed; restarting the container", "container", spec.Name, "failures", failures, "err", err)
				c.restart(fmt.Sprintf("liveness probe failed %d times: %v", failures, err))
				armed, failures = false, 0
			}
		}
	}
}

// httpProbe runs an httpGet probe: 200-399 passes.
func httpProbe(ctx context.Context, client *http.Client, g *corev1.HTTPGetAction, c corev1.Container, hostIP string) error {
	port := g.Port.IntValue()
	if g.Port.Type == intstr.String { // a named port
		for _, cp := range c.Ports {
			if cp.Name == g.Port.StrVal {
				port = int(cp.ContainerPort)
			}
		}
	}
	if port <= 0 {
		return fmt.Errorf("probe port %s not found", g.Port.String())
	}
	host := g.Host
	if host == "" {
		host = hostIP // a hostNetwork pod's IP is the host's
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("probe %s: %s", u.String(), resp.Status)
	}
	return nil
}

// podState is a static pod with the status the kubelet reports for it.
type podState struct {
	StaticPod
	Status corev1.PodStatus
}

// states returns every pod with its current status, sorted by name.
func (m *podManager) states() []podState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]podState, 0, len(m.pods))
	for _, w := range m.pods {
		out = append(out, podState{StaticPod: w.sp, Status: w.status(m.hostIP)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName() < out[j].FullName() })
	return out
}

// status builds the pod's status as the real kubelet's
// generateAPIPodStatus would for a hostNetwork pod: phase Running once
// every container has started (kubeadm's WaitForPodsWithLabel waits for
// phase Running), Ready when every container runs and passes its probe.
// Times are truncated to seconds (the API's precision), so an unchanged
// status compares equal.
func (w *podWorker) status(hostIP string) corev1.PodStatus {
	start := metav1.NewTime(w.started.Truncate(time.Second))
	st := corev1.PodStatus{Phase: corev1.PodPending, HostIP: hostIP, PodIP: hostIP, StartTime: &start}
	if hostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: hostIP}}
		st.PodIPs = []corev1.PodIP{{IP: hostIP}}
	}
	if w.startErr != nil {
		st.Reason, st.Message = "StandInCannotRun", w.startErr.Error()
	}
	w.mu.Lock()
	ready := map[string]bool{}
	for k, v := range w.ready {
		ready[k] = v
	}
	w.mu.Unlock()
	allRunning, allReady := len(w.containers) > 0, len(w.containers) > 0
	for i, c := range w.containers {
		spec := w.sp.Pod.Spec.Containers[i]
		cs := c.state()
		s := corev1.ContainerStatus{
			Name: spec.Name, Image: spec.Image, ImageID: spec.Image,
			RestartCount: cs.Restarts,
			Ready:        cs.Running && ready[spec.Name],
		}
		started := cs.Running
		s.Started = &started
		if cs.Running {
			s.ContainerID = fmt.Sprintf("process://%d", cs.PID)
			s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(cs.StartedAt.Truncate(time.Second))}
		} else {
			allRunning = false
			reason := "ContainerCreating"
			if cs.LastExit != "" {
				reason = "CrashLoopBackOff"
			}
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: cs.LastExit}
		}
		if cs.LastExit != "" {
			s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: cs.ExitCode, Reason: "Error", Message: cs.LastExit,
				FinishedAt: metav1.NewTime(cs.LastExitAt.Truncate(time.Second)),
			}
		}
		if !s.Ready {
			allReady = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, s)
	}
	if allRunning {
		st.Phase = corev1.PodRunning
	}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s}
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, w.startErr == nil),
		cond(corev1.PodInitialized, true),
		cond(corev1.PodReady, allReady),
		cond(corev1.ContainersReady, allReady),
		cond(corev1.PodScheduled, true),
	}
	return st
}

// runtimePods is what the runtime endpoint lists (package cri's Pods):
// every pod not removed through it, its ID the pod's UID (the manifest's
// hash), labelled as the real kubelet labels a sandbox
// (io.kubernetes.pod.*, pkg/kubelet/types/labels.go) plus the pod's own.
func (m *podManager) runtimePods() []cri.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cri.Pod
	for _, w := range m.pods {
		if w.removed {
			continue
		}
		p := w.sp.Pod
		labels := map[string]string{
			"io.kubernetes.pod.name":      p.Name,
			"io.kubernetes.pod.namespace": p.Namespace,
			"io.kubernetes.pod.uid":       string(p.UID),
		}
		for k, v := range p.Labels {
			labels[k] = v
		}
		ready := !w.stopped && w.startErr == nil
		out = append(out, cri.Pod{ID: string(p.UID), Name: p.Name, Namespace: p.Namespace, UID: string(p.UID),
			Ready: ready, CreatedAt: w.started.UnixNano(), Labels: labels})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// stopRuntimePod stops the pod whose UID is id (the runtime's
// StopPodSandbox, RemovePodSandbox: what kubeadm reset's cleanup-node
// phase calls). The pod stays known, stopped, until its manifest goes
// or changes: as when the real kubelet is stopped before the runtime's
// containers are removed (kubeadm reset stops the kubelet service first;
// here nothing does), its manifest is not started again meanwhile.
// Unknown IDs are not an error (CRI: both calls are idempotent).
func (m *podManager) stopRuntimePod(id string, remove bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, w := range m.pods {
		if string(w.sp.Pod.UID) != id {
			continue
		}
		if !w.stopped {
			m.log.Info("static pod stopped through the runtime endpoint", "pod", key, "remove", remove)
			// "If there are any running containers in the sandbox, they
			// must be forcibly terminated" (k8s.io/cri-api
			// pkg/apis/runtime/v1/api.proto, StopPodSandbox): SIGKILL, no
			// grace period. kubeadm reset gives each call 2 s
			// (cmd/kubeadm/app/util/runtime defaultTimeout); an apiserver
			// whose etcd member reset just removed would take its whole
			// grace period (30 s) on SIGTERM.
			for _, c := range w.containers {
				c.forceStop()
			}
			w.cancel()
			for _, c := range w.containers {
				c.wait()
			}
			w.stopped = true
		}
		if remove {
			w.removed = true
		}
	}
	m.changed()
}

// runtimePods adapts a podManager to package cri's Pods.
type runtimePods struct{ m *podManager }

func (r runtimePods) List() []cri.Pod { return r.m.runtimePods() }

func (r runtimePods) Stop(_ context.Context, id string) error {
	r.m.stopRuntimePod(id, false)
	return nil
}

func (r runtimePods) Remove(_ context.Context, id string) error {
	r.m.stopRuntimePod(id, true)
	return nil
}
