// Package kubelet is the test bed's kubelet: on a test host it does what
// kubeadm relies on from the kubelet, with processes in place of
// containers. It runs the static pods of the KubeletConfiguration's
// staticPodPath (kube-apiserver, kube-controller-manager and
// kube-scheduler images as the real binaries of the image's version, etcd
// as go.etcd.io/etcd/server/v3's real main with the manifest's flags),
// restarts them when they exit, fail their liveness probe or their
// manifest changes, publishes their
// mirror pods with kubernetes.io/config.hash, does the TLS bootstrap that
// kubeadm join waits for, registers its Node with a heartbeat Lease and
// serves /healthz (127.0.0.1:10248 by default).
//
// What kubeadm waits for, and where this package does it:
//   - init and join, WaitForKubelet: GET http://127.0.0.1:10248/healthz
//     → serveHealthz (healthzBindAddress:healthzPort of the config file).
//   - init, WaitForControlPlaneComponents / WaitForAPI: the components'
//     own /livez, /healthz → served by the real binaries podManager runs.
//   - init, mark-control-plane (PatchNode): the Node exists → heartbeat,
//     registerNode (labels kubernetes.io/hostname, kubernetes.io/os).
//   - join, waitForTLSBootstrappedClient: /etc/kubernetes/kubelet.conf
//     → bootstrap, tlsBootstrap (CSR approved and signed by the real
//     kube-controller-manager; pair in <cert-dir>/kubelet-client-current.pem).
//   - join control plane: the etcd static pod running while/before the
//     bootstrap → podManager runs static pods from the start, without the API.
//   - etcd endpoints (GetEtcdEndpointsWithBackoff): mirror pods' annotation
//     kubeadm.kubernetes.io/etcd.advertise-client-urls → mirrorPod copies
//     the manifest's annotations.
//   - upgrade, WaitForStaticPodHashChange / WaitForStaticPodSingleHash:
//     kubernetes.io/config.hash of <component>-<node> → ParseStaticPod,
//     mirrors.sync (a changed hash recreates the mirror pod).
//   - upgrade, WaitForPodsWithLabel: component=<name> pods in phase Running
//     → podWorker.status, mirrors.sync (UpdateStatus).
//   - preflight / upgrade node: `kubelet --version` → VersionLine,
//     --hamaster-version.
//   - init kubelet-finalize: <cert-dir>/kubelet-client-current.pem, when
//     present, is what kubelet.conf is repointed at; a rewritten kubeconfig
//     is picked up (Run reconnects the API side when the file changes).
//
// Restarts: without systemd kubeadm's TryStartKubelet/TryRestartKubelet
// do nothing. The stand-in therefore waits for its config file to appear,
// re-reads it when it changes (staticPodPath, podLogsDir and the probe
// cadence apply at once; a new healthz address needs a restart), and
// reconnects to the API when --kubeconfig changes. Flags (kubeadm-flags.env)
// change only when the test bed restarts the process; pods run as its
// children and die with it, so a restart starts them afresh.
package kubelet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hamaster/hamaster/internal/ctxutil"
	"github.com/hamaster/hamaster/testbed/cri"
)

// SandboxImage is the sandbox image the runtime endpoint reports:
// kubeadm v1.33's own pause image (cmd/kubeadm/app/constants PauseVersion
// 3.10), so preflight does not warn that the runtime's differs.
const SandboxImage = "registry.k8s.io/pause:3.10"

// imageResolver adapts a Resolver to package cri's Images.
type imageResolver struct{ r Resolver }

func (i imageResolver) Resolve(image string) (uint64, error) { return i.r.ResolveImage(image) }

// Run runs the kubelet until ctx ends, then stops its pods.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	if err := o.Check(); err != nil {
		return err
	}
	for _, f := range o.Ignored {
		log.Debug("ignoring kubelet flag the stand-in has no use for", "flag", f)
	}
	nodeName, err := o.NodeName()
	if err != nil {
		return err
	}
	ip := o.NodeIP
	if ip == "" {
		if ip, err = hostIP(nodeName); err != nil {
			return err
		}
	}
	if net.ParseIP(ip) == nil {
		return fmt.Errorf("--node-ip %q is not an IP address", ip)
	}
	if o.Self == "" {
		if o.Self, err = os.Executable(); err != nil {
			return fmt.Errorf("own executable (for etcd pods): %w", err)
		}
	}
	log = log.With("node", nodeName)

	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	resolver := Resolver{BinDir: o.BinDir, Self: o.Self}
	pm := newPodManager(resolver, defaultPodLogsDir, ip, log, notify)
	defer pm.stopAll()

	// The runtime endpoint is up from the start: kubeadm's preflight
	// (CRI, ImagePull) runs before its kubelet-start phase writes the
	// config the kubelet waits for below.
	sock := o.RuntimeEndpoint
	if sock == "" {
		sock = cri.DefaultSocket
	}
	rt, err := cri.Listen(cri.Config{Socket: sock, SandboxImage: SandboxImage, Pods: runtimePods{pm}, Images: imageResolver{resolver}, Log: log})
	if err != nil {
		return fmt.Errorf("runtime endpoint: %w", err)
	}
	defer func() {
		if err := rt.Close(); err != nil {
			log.Warn("runtime endpoint", "err", err)
		}
	}()
	log.Info("runtime endpoint serving", "socket", sock)

	cfgData, cfg, err := waitConfig(ctx, o.Config, log)
	if err != nil {
		return err
	}
	log.Info("kubelet starting", "version", o.Version, "node_ip", ip, "static_pod_path", cfg.StaticPodPath, "healthz", cfg.HealthzAddr())
	pm.setLogsDir(cfg.PodLogsDir)

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if addr := cfg.HealthzAddr(); addr != "" {
		srv, err := serveHealthz(addr, log)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ctx.Done()
			_ = srv.Close()
		}()
	}

	ns := nodeSpec{Name: nodeName, IP: ip, Version: o.Version, Labels: o.NodeLabels}
	api := &apiSide{o: o, ns: ns, log: log, changed: changed, pm: pm}
	startAPI := func(c Config) context.CancelFunc {
		actx, acancel := context.WithCancel(ctx)
		wg.Add(1)
		go func() { defer wg.Done(); api.run(actx, c) }()
		return acancel
	}
	stopAPI := startAPI(cfg)

	var lastBad string
	for {
		pods, bad, err := ReadStaticPods(cfg.StaticPodPath, nodeName)
		if err != nil {
			log.Warn("static pod path unreadable", "err", err)
		} else {
			if s := fmt.Sprint(bad); len(bad) > 0 && s != lastBad {
				for f, e := range bad {
					log.Warn("static pod manifest skipped", "file", f, "err", e)
				}
				lastBad = s
			}
			pm.sync(ctx, pods)
		}
		if !ctxutil.Sleep(ctx, cfg.FileCheckFrequency.Duration) {
			stopAPI()
			return nil
		}
		// Re-read the config file and the kubeconfig (kubeadm rewrites
		// them and would restart a systemd kubelet).
		if data, err := os.ReadFile(o.Config); err == nil && !bytes.Equal(data, cfgData) {
			if c, err := ParseConfig(data); err != nil {
				log.Warn("changed kubelet config ignored", "err", err)
			} else {
				if c.HealthzAddr() != cfg.HealthzAddr() {
					log.Warn("healthz address changed; it applies after a restart", "healthz", c.HealthzAddr())
				}
				log.Info("kubelet config changed; applying it", "static_pod_path", c.StaticPodPath)
				pm.setLogsDir(c.PodLogsDir)
				cfg, cfgData = c, data
				stopAPI()
				stopAPI = startAPI(cfg)
			}
		}
		// A kubeconfig rewritten after the API side loaded it (kubeadm's
		// kubelet-finalize; not the one the bootstrap just wrote).
		if loaded := api.loadedSum(); loaded != ([32]byte{}) && fileSum(o.Kubeconfig) != loaded {
			log.Info("kubeconfig changed; reconnecting", "kubeconfig", o.Kubeconfig)
			stopAPI()
			stopAPI = startAPI(cfg)
		}
	}
}

// apiSide is the kubelet's dealings with the apiserver: bootstrap, Node
// and Lease, mirror pods.
type apiSide struct {
	o       Options
	ns      nodeSpec
	log     *slog.Logger
	changed chan struct{}
	pm      *podManager

	mu     sync.Mutex
	loaded [32]byte // the kubeconfig's sha256 when the client was made
}

func (a *apiSide) loadedSum() [32]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loaded
}

func (a *apiSide) run(ctx context.Context, cfg Config) {
	a.mu.Lock()
	a.loaded = [32]byte{}
	a.mu.Unlock()
	rc, sum, err := bootstrap(ctx, a.o, a.ns.Name, a.log)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Error("no client for the apiserver", "err", err)
		}
		return
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		a.log.Error("apiserver client", "err", err)
		return
	}
	a.mu.Lock()
	a.loaded = sum
	a.mu.Unlock()
	var mu sync.Mutex
	var node *corev1.Node
	done := make(chan struct{})
	go func() {
		defer close(done)
		heartbeat(ctx, client, a.ns, cfg.NodeStatusUpdateFrequency.Duration, cfg.NodeLeaseDurationSeconds, a.log, func(n *corev1.Node) {
			mu.Lock()
			node = n
			mu.Unlock()
			select {
			case a.changed <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { <-done }()
	m := newMirrors(client, a.log)
	var lastErr string
	for {
		mu.Lock()
		n := node
		mu.Unlock()
		if n != nil {
			err := m.sync(ctx, n, a.pm.states())
			if msg := fmt.Sprint(err); err != nil && msg != lastErr && ctx.Err() == nil {
				a.log.Warn("mirror pods not in sync; retrying", "err", err)
			}
			lastErr = fmt.Sprint(err)
		}
		// Sync again on a change, or every 2 s (a failure, a deleted mirror pod).
		t := time.NewTimer(2 * time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.changed:
			t.Stop()
		case <-t.C:
		}
	}
}

// waitConfig reads the config file, waiting for it to appear and parse
// (kubeadm writes it after the kubelet may have been started).
func waitConfig(ctx context.Context, path string, log *slog.Logger) ([]byte, Config, error) {
	for attempt := 0; ; attempt++ {
		data, err := os.ReadFile(path)
		if err == nil {
			c, perr := ParseConfig(data)
			if perr == nil {
				return data, c, nil
			}
			err = perr
		}
		if attempt == 0 {
			log.Info("waiting for the kubelet config", "config", path, "reason", err)
		}
		select {
		case <-ctx.Done():
			return nil, Config{}, fmt.Errorf("kubelet config %s: %w (last: %v)", path, ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

func fileSum(path string) [32]byte {
	data, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(data)
}

// serveHealthz serves GET /healthz → "ok" on addr (kubeadm's
// WaitForKubelet polls it).
func serveHealthz(addr string, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("healthz on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("healthz server", "err", err)
		}
	}()
	return srv, nil
}

// hostIP is the node's address when --node-ip is not given: what its
// name resolves to, else the first global unicast address of the host
// (the real kubelet's nodeutil.GetNodeHostIPs / ChooseHostInterface).
func hostIP(name string) (string, error) {
	if ips, err := net.LookupIP(name); err == nil {
		for _, ip := range ips {
			if ip.IsGlobalUnicast() {
				return ip.String(), nil
			}
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("node IP: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("node IP: no global unicast address; pass --node-ip")
}
