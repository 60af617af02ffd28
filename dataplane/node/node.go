// Package node is the runtime of one control-plane replica of the local
// provider: what a cloud VM runs. It reads its configuration from an env
// file (the local stand-in for GCE's "kube-env" metadata), runs a real
// embedded etcd member, and serves either a kube-apiserver stand-in over
// HTTPS with /healthz, /readyz, /version and a small /kv/{key} API backed
// by the local etcd member, or (CONTROL_PLANE=real) a real kube-apiserver
// as a child process (kubeapiserver.go).
//
// A parent process starts it as `hamaster-node replica --env-file F` and
// watches STATUS_FILE; SIGHUP re-reads STATIC_IP_FILE, SIGTERM stops it
// gracefully.
package node

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
)

const (
	// statusInterval is how often the status file is rewritten and the
	// static IP file re-checked.
	statusInterval = 500 * time.Millisecond
	// httpShutdownTimeout bounds the drain of in-flight requests.
	httpShutdownTimeout = 5 * time.Second
	// etcdStopTimeout bounds the wait for etcd to stop.
	etcdStopTimeout = 30 * time.Second
)

// node is one running replica.
type node struct {
	cfg    Config
	log    *slog.Logger
	etcd   *etcdMember
	events *etcdMember // kube-up's events cluster; nil in replica mode

	opts apiserverOptions
	// kapi is the real apiserver (CONTROL_PLANE=real) once started, else
	// nil; set after the status loop runs, hence atomic.
	kapi        atomic.Pointer[kubeAPIServer]
	kapiStop    context.CancelFunc
	kapiDone    chan struct{}
	tlsConfig   *tls.Config
	httpHandler http.Handler
	audit       io.WriteCloser
	auditMu     sync.Mutex

	shuttingDown atomic.Bool
	ready        readiness
	changed      chan struct{} // poked when the status should be rewritten

	serveWG sync.WaitGroup

	mu          sync.Mutex // guards the fields below
	servers     map[string]*http.Server
	proxies     map[string]*tcpProxy // real apiserver: static IP → NODE_ADDRESS
	apiState    string
	apiErr      string
	staticIP    string // the IP STATIC_IP_FILE names
	staticBound string // the static address bound, "" if none
	staticErr   string
}

// Run runs the replica until ctx is done, then stops gracefully: /readyz
// fails at once, the apiserver listeners close after
// --shutdown-delay-duration, then etcd stops, the final status is written
// and PID_FILE is removed. A bad APISERVER_EXTRA_ARGS does not make Run
// fail: the apiserver is "refused" while etcd keeps running, like a VM
// whose apiserver crash-loops.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// The stand-in plays Kubernetes v1.x only: another major version is a
	// release it has no binary for, and it fails at start the way a node
	// whose image cannot be pulled never comes up.
	if !strings.HasPrefix(cfg.KubeVersion, "v1.") {
		return errkind.Errorf(errkind.InvalidArgument, "KUBE_VERSION=%s: no control-plane binary for this version (this node runs v1.x)", cfg.KubeVersion)
	}
	return run(ctx, cfg, logger, func(n *node) (*etcdMember, *etcdMember) {
		return newEtcdMember(cfg, n.log, n.poke), nil
	})
}

// run runs a node whose etcd members members makes: the main one (the
// apiserver's storage, /readyz's subject) and optionally an events one
// (kube-up's second cluster), which only runs and reports its state.
func run(ctx context.Context, cfg Config, logger *slog.Logger, members func(n *node) (main, events *etcdMember)) (err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("node", cfg.Name)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", nodeapi.KeyDataDir, err)
	}
	if cfg.PIDFile != "" {
		removePID, err := fsutil.WritePIDFile(cfg.PIDFile)
		if err != nil {
			return fmt.Errorf("write %s: %w", nodeapi.KeyPIDFile, err)
		}
		defer func() {
			if err := removePID(); err != nil {
				logger.Warn("remove pid file", "err", err)
			}
		}()
	}

	n := &node{
		cfg:      cfg,
		log:      logger,
		changed:  make(chan struct{}, 1),
		servers:  map[string]*http.Server{},
		proxies:  map[string]*tcpProxy{},
		apiState: nodeapi.APIServerStopped,
	}
	n.etcd, n.events = members(n)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	statusCtx, stopStatus := context.WithCancel(context.WithoutCancel(ctx))
	var statusWG sync.WaitGroup
	statusWG.Go(func() { n.statusLoop(statusCtx) })
	defer func() {
		stopStatus()
		statusWG.Wait()
		n.writeStatus()
	}()

	etcdCtx, stopEtcd := context.WithCancel(context.WithoutCancel(ctx))
	etcdDone := make(chan struct{})
	go func() {
		defer close(etcdDone)
		var wg sync.WaitGroup
		for _, m := range []*etcdMember{n.etcd, n.events} {
			if m != nil {
				wg.Go(func() { m.run(etcdCtx) })
			}
		}
		wg.Wait()
	}()
	defer func() {
		stopEtcd()
		t := time.NewTimer(etcdStopTimeout)
		defer t.Stop()
		select {
		case <-etcdDone:
		case <-t.C:
			err = fmt.Errorf("etcd member %s did not stop within %v", cfg.Name, etcdStopTimeout)
			n.log.Error("giving up on a clean stop", "err", err)
		}
	}()

	n.startAPIServer(ctx)
	if n.audit != nil {
		defer n.audit.Close()
	}

	tick := time.NewTicker(statusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			n.shutdownAPIServer()
			return nil
		case <-hup:
			n.log.Info("SIGHUP: re-reading static IP file")
			n.reconcileListeners()
		case <-tick.C:
			n.reconcileListeners()
		}
	}
}

// startAPIServer parses the apiserver flags and certificate and binds the
// listeners; on a bad flag or certificate the apiserver is refused. With
// CONTROL_PLANE=real it starts the real apiserver's supervisor instead
// (refused when the version has no binary).
func (n *node) startAPIServer(ctx context.Context) {
	if n.cfg.Real() {
		k, err := newKubeAPIServer(n.cfg)
		if err != nil {
			n.log.Error("apiserver refused to start", "err", err)
			n.mu.Lock()
			n.apiState, n.apiErr = nodeapi.APIServerRefused, err.Error()
			n.mu.Unlock()
			n.poke()
			return
		}
		n.kapi.Store(k)
		kctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		n.kapiStop, n.kapiDone = stop, make(chan struct{})
		go func() {
			defer close(n.kapiDone)
			n.runKubeAPIServer(kctx, k)
		}()
		return
	}
	opts, err := parseAPIServerArgs(n.cfg.APIServerExtraArgs)
	if err == nil {
		n.tlsConfig, err = loadTLS(n.cfg.APIServerCert, n.cfg.APIServerKey)
		if err == nil {
			n.tlsConfig, err = withClientCA(n.tlsConfig, cmp.Or(n.cfg.ClientCAFile, n.cfg.EtcdCACert))
		}
	}
	if err == nil && opts.AuditLogPath != "" {
		n.audit, err = openAudit(opts.AuditLogPath)
	}
	if err != nil {
		n.log.Error("apiserver refused to start", "err", err, "args", n.cfg.APIServerExtraArgs)
		n.mu.Lock()
		n.apiState, n.apiErr = nodeapi.APIServerRefused, err.Error()
		n.mu.Unlock()
		n.poke()
		return
	}
	n.opts = opts
	n.httpHandler = n.handler()
	n.reconcileListeners()
}

// reconcileListeners binds NODE_ADDRESS:port (retrying if it failed) and
// makes the static-IP listener match STATIC_IP_FILE (re-read every time:
// it is a few bytes).
func (n *node) reconcileListeners() {
	if (n.httpHandler == nil && n.kapi.Load() == nil) || n.shuttingDown.Load() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	before := n.statusKeyLocked()
	defer func() {
		if n.statusKeyLocked() != before {
			n.poke()
		}
	}()

	primary := n.cfg.APIServerAddress()
	if n.kapi.Load() != nil {
		if n.apiState != nodeapi.APIServerServing {
			return // the static IP waits until the apiserver serves
		}
	} else if n.servers[primary] == nil {
		if err := n.bind(primary); err != nil {
			if n.apiErr != err.Error() {
				n.log.Error("apiserver cannot listen", "addr", primary, "err", err)
			}
			n.apiState, n.apiErr = nodeapi.APIServerRefused, err.Error()
			return // the static IP waits until the apiserver serves
		}
		n.apiState, n.apiErr = nodeapi.APIServerServing, ""
	}
	if n.cfg.StaticIPFile == "" {
		return
	}
	ip, err := readStaticIP(n.cfg.StaticIPFile)
	if err != nil {
		if n.staticErr != err.Error() {
			n.log.Error("static IP file", "err", err)
		}
		n.staticErr = err.Error()
		return
	}
	n.staticIP = ip
	want := ""
	if ip != "" && ip != n.cfg.Address {
		want = net.JoinHostPort(ip, strconv.Itoa(n.cfg.APIServerPort))
	}
	if want == n.staticBound {
		n.staticErr = ""
		return
	}
	if n.staticBound != "" {
		n.unbind(n.staticBound)
		n.staticBound = ""
	}
	if want == "" {
		n.staticErr = ""
		return
	}
	if err := n.bind(want); err != nil {
		if n.staticErr != err.Error() {
			n.log.Error("cannot listen on static IP; retrying", "addr", want, "err", err)
		}
		n.staticErr = err.Error()
		return
	}
	n.staticBound, n.staticErr = want, ""
}

// statusKeyLocked summarises the listener state to detect changes.
func (n *node) statusKeyLocked() string {
	return strings.Join([]string{n.apiState, n.apiErr, n.staticIP, n.staticBound, n.staticErr}, "|")
}

// readStaticIP returns the IP the static IP file names, "" if it is
// missing or empty.
func readStaticIP(path string) (string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", nodeapi.KeyStaticIPFile, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", nil
	}
	if strings.ContainsAny(v, " \t\n") {
		return "", fmt.Errorf("%s %s: want zero or one IP, got %q", nodeapi.KeyStaticIPFile, path, v)
	}
	if err := checkLoopback(nodeapi.KeyStaticIPFile+" "+path, v); err != nil {
		return "", err
	}
	return net.ParseIP(v).String(), nil
}

// shutdownAPIServer fails /readyz, waits --shutdown-delay-duration, then
// closes the listeners and drains in-flight requests.
func (n *node) shutdownAPIServer() {
	n.shuttingDown.Store(true)
	n.poke()
	if n.kapi.Load() != nil {
		// kube-apiserver fails /readyz on SIGTERM and keeps serving for its
		// --shutdown-delay-duration; the static IP forwards until it exits.
		n.kapiStop()
		<-n.kapiDone
		n.mu.Lock()
		proxies := n.proxies
		n.proxies = map[string]*tcpProxy{}
		n.staticBound = ""
		n.apiState, n.apiErr = nodeapi.APIServerStopped, ""
		n.mu.Unlock()
		for _, p := range proxies {
			_ = p.Close()
		}
		n.poke()
		return
	}
	if n.httpHandler == nil {
		return
	}
	if d := n.opts.ShutdownDelay; d > 0 {
		n.log.Info("shutting down: /readyz fails; listeners close after the shutdown delay", "delay", d)
		t := time.NewTimer(d)
		<-t.C
	}
	n.mu.Lock()
	servers := n.servers
	n.servers = map[string]*http.Server{}
	n.staticBound = ""
	n.apiState, n.apiErr = nodeapi.APIServerStopped, ""
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for addr, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				n.log.Warn("apiserver drain incomplete; closing", "addr", addr, "err", err)
				_ = srv.Close()
			}
		})
	}
	wg.Wait()
	n.serveWG.Wait()
	n.poke()
	n.log.Info("apiserver stopped")
}

// poke asks the status loop to rewrite the status file soon.
func (n *node) poke() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// statusLoop rewrites the status file on changes and every statusInterval,
// refreshing the readiness answer on the ticks.
func (n *node) statusLoop(ctx context.Context) {
	tick := time.NewTicker(statusInterval)
	defer tick.Stop()
	n.writeStatus()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.changed:
		case <-tick.C:
			if !n.shuttingDown.Load() {
				n.checkReady(ctx)
			}
		}
		n.writeStatus()
	}
}

// status builds the current nodeapi.Status.
func (n *node) status() nodeapi.Status {
	etcdState, etcdErr, _, _ := n.etcd.snapshot()
	ready, reason := n.cachedReady()
	if n.shuttingDown.Load() {
		ready, reason = false, "shutting down"
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	listeners := make([]string, 0, len(n.servers)+len(n.proxies)+1)
	for addr := range n.servers {
		listeners = append(listeners, addr)
	}
	for addr := range n.proxies {
		listeners = append(listeners, addr)
	}
	controlPlane, kapiPID := nodeapi.ControlPlaneStandin, 0
	if n.cfg.Real() {
		controlPlane = nodeapi.ControlPlaneReal
		if n.kapi.Load() != nil {
			kapiPID = n.kapi.Load().PID()
		}
		if n.apiState == nodeapi.APIServerServing {
			listeners = append(listeners, n.cfg.APIServerAddress())
		}
	}
	sort.Slice(listeners, func(i, j int) bool {
		// NODE_ADDRESS first, then the static IP.
		pi, pj := listeners[i] == n.cfg.APIServerAddress(), listeners[j] == n.cfg.APIServerAddress()
		if pi != pj {
			return pi
		}
		return listeners[i] < listeners[j]
	})
	if n.apiState != nodeapi.APIServerServing {
		ready, reason = false, "apiserver is "+n.apiState
	}
	var eventsState, eventsErr string
	if n.events != nil {
		eventsState, eventsErr, _, _ = n.events.snapshot()
	}
	return nodeapi.Status{
		EtcdEvents:      eventsState,
		EtcdEventsError: eventsErr,
		PID:             os.Getpid(),
		Name:            n.cfg.Name,
		Etcd:            etcdState,
		EtcdError:       etcdErr,
		APIServer:       n.apiState,
		APIServerError:  n.apiErr,
		Ready:           ready,
		ReadyReason:     reason,
		Listeners:       listeners,
		StaticIP:        n.staticIP,
		StaticIPError:   n.staticErr,
		Version:         n.cfg.KubeVersion,
		ControlPlane:    controlPlane,
		APIServerPID:    kapiPID,
		Updated:         time.Now().UTC(),
	}
}

func (n *node) writeStatus() {
	if n.cfg.StatusFile == "" {
		return
	}
	if err := fsutil.ReplaceJSON(n.cfg.StatusFile, n.status(), 0o644); err != nil {
		n.log.Error("write status file", "path", n.cfg.StatusFile, "err", err)
	}
}
