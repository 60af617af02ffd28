package node

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/ctxutil"
)

// The real control plane: with CONTROL_PLANE=real the replica runs
// kube-apiserver (KUBE_APISERVER_DIR/<KUBE_VERSION>/kube-apiserver) as a
// child process, the way a kubelet runs its static pod: started once the
// replica's etcd member is a voter (a learner refuses the apiserver's
// requests and its post-start hooks would give up), restarted when it
// exits, stopped with SIGTERM (it fails /readyz at once and keeps serving
// for --shutdown-delay-duration so the LB stops sending first). While the
// static IP is attached the node forwards staticIP:port to it at L4, as a
// cloud's access config forwards the external address to the VM.

const (
	// DefaultShutdownDelay is the real apiserver's --shutdown-delay-duration
	// unless APISERVER_EXTRA_ARGS sets one: long enough for the local LB
	// (checks every 200 ms, 2 failures) to see /readyz fail first.
	DefaultShutdownDelay = 2 * time.Second
	// WatchTerminationGrace is the real apiserver's
	// --shutdown-watch-termination-grace-period: the time over which it
	// ends its open watches once the shutdown delay is over.
	WatchTerminationGrace = time.Second
	// ServiceAccountIssuer is the real apiserver's --service-account-issuer.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// kubeAPIServerStopTimeout bounds the wait for the real apiserver to
	// exit after SIGTERM (shutdown delay plus draining) before SIGKILL.
	kubeAPIServerStopTimeout = 60 * time.Second
	// maxRestartBackoff caps the wait between restarts of an apiserver
	// that keeps exiting.
	maxRestartBackoff = 30 * time.Second
	// KubeAPIServerChecksums is the file beside each binary listing
	// "sha256  name" lines (sha256sum's format).
	KubeAPIServerChecksums = "SHA256SUMS"
)

// kubeAPIServerBinary returns the kube-apiserver of version under dir once
// its sha256 matches the one recorded beside it.
func kubeAPIServerBinary(dir, version string) (string, error) {
	bin := nodeapi.KubeAPIServerPath(dir, version)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s=%s: no kube-apiserver binary for this version (%w); build it with 'make kube-apiserver'", nodeapi.KeyKubeVersion, version, err)
	}
	sums, err := os.ReadFile(filepath.Join(filepath.Dir(bin), KubeAPIServerChecksums))
	if err != nil {
		return "", fmt.Errorf("kube-apiserver %s: no recorded checksum: %w", version, err)
	}
	want := ""
	for _, line := range strings.Split(string(sums), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.TrimPrefix(f[1], "*") == "kube-apiserver" {
			want = f[0]
		}
	}
	if want == "" {
		return "", fmt.Errorf("kube-apiserver %s: %s lists no kube-apiserver", version, KubeAPIServerChecksums)
	}
	f, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("kube-apiserver %s: %w", version, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return "", fmt.Errorf("kube-apiserver %s: sha256 %s, but %s records %s (rebuild with 'make kube-apiserver')", version, got, KubeAPIServerChecksums, want)
	}
	return bin, nil
}

// kubeAPIServerArgs is the real apiserver's command line, derived from the
// replica's configuration, with APISERVER_EXTRA_ARGS last (a flag given
// twice takes its last value, so the extra args override the defaults).
func kubeAPIServerArgs(c Config) []string {
	addr := c.Address
	args := []string{
		"--advertise-address=" + addr,
		"--bind-address=" + addr,
		"--secure-port=" + strconv.Itoa(c.APIServerPort),
		"--tls-cert-file=" + c.APIServerCert,
		"--tls-private-key-file=" + c.APIServerKey,
		// Clients authenticate with certificates the cluster CA signs
		// (hamaster kubeconfig); anonymous requests reach only what RBAC
		// gives system:unauthenticated: /healthz, /readyz, /livez, /version.
		"--client-ca-file=" + cmp.Or(c.ClientCAFile, c.EtcdCACert),
		"--authorization-mode=RBAC",
		// Storage: this replica's own etcd member, over mTLS with the peer
		// certificate (ExtKeyUsage ClientAuth, signed by the etcd CA).
		"--etcd-servers=" + c.EtcdClientURL(),
		"--etcd-cafile=" + c.EtcdCACert,
		"--etcd-certfile=" + c.EtcdPeerCert,
		"--etcd-keyfile=" + c.EtcdPeerKey,
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + c.ServiceAccountKeyFile,
		"--service-account-signing-key-file=" + c.ServiceAccountKeyFile,
		"--service-cluster-ip-range=" + c.ServiceCIDR(),
		// Each apiserver keeps its own address in the "kubernetes"
		// endpoints through a lease in etcd; a dead one's expires.
		"--endpoint-reconciler-type=lease",
		"--shutdown-delay-duration=" + DefaultShutdownDelay.String(),
		// After the delay, its clients are shed rather than waited on:
		// open watches are ended (spread over the period; each client
		// re-watches through the LB from its last resource version), and a
		// request on a kept-alive connection gets 429 + Retry-After and
		// Connection: close, so its client retries elsewhere. Without
		// them the graceful stop waits on every watch (its HTTP server's
		// shutdown timeout, 60 s) and the VM's stop kills it first.
		"--shutdown-watch-termination-grace-period=" + WatchTerminationGrace.String(),
		"--shutdown-send-retry-after=true",
		"--cert-dir=" + filepath.Join(c.DataDir, "kube-apiserver"),
	}
	return append(args, strings.Fields(c.APIServerExtraArgs)...)
}

// kubeAPIServer supervises the real apiserver process of a node.
type kubeAPIServer struct {
	bin     string
	args    []string
	logPath string
	probe   *http.Client // GET /readyz, trusting the cluster CA
	base    string       // https://NODE_ADDRESS:port

	mu     sync.Mutex
	pid    int
	served bool // answered HTTP since it last started
}

// newKubeAPIServer checks the binary and certificates the real apiserver
// needs; an error refuses the apiserver.
func newKubeAPIServer(c Config) (*kubeAPIServer, error) {
	bin, err := kubeAPIServerBinary(c.KubeAPIServerDir, c.KubeVersion)
	if err != nil {
		return nil, err
	}
	caFile := cmp.Or(c.ClientCAFile, c.EtcdCACert)
	pool, err := certs.LoadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("load cluster CA: %w", err)
	}
	logDir := c.DataDir
	if c.StatusFile != "" {
		logDir = filepath.Dir(c.StatusFile)
	}
	return &kubeAPIServer{
		bin:     bin,
		args:    kubeAPIServerArgs(c),
		logPath: filepath.Join(logDir, "kube-apiserver.log"),
		base:    "https://" + c.APIServerAddress(),
		probe: &http.Client{Timeout: readyReadTimeout, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		}},
	}, nil
}

// PID is the running process's pid, 0 when none runs.
func (k *kubeAPIServer) PID() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pid
}

// checkReady asks the real apiserver's /readyz; any HTTP answer means it
// serves (the node then reports APIServerServing).
func (k *kubeAPIServer) checkReady(ctx context.Context) (serving, ready bool, reason string) {
	ctx, cancel := context.WithTimeout(ctx, readyReadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.base+"/readyz", nil)
	if err != nil {
		return false, false, err.Error()
	}
	resp, err := k.probe.Do(req)
	if err != nil {
		if k.PID() == 0 {
			return false, false, "kube-apiserver is not running"
		}
		return false, false, "kube-apiserver is not serving yet: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	k.mu.Lock()
	k.served = true
	k.mu.Unlock()
	if resp.StatusCode != http.StatusOK {
		return true, false, fmt.Sprintf("kube-apiserver /readyz: %d %s", resp.StatusCode, lastFailedCheck(body))
	}
	return true, true, ""
}

// lastFailedCheck picks the "[-]name failed" lines of a /readyz answer.
func lastFailedCheck(body []byte) string {
	var failed []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			failed = append(failed, strings.TrimPrefix(l, "[-]"))
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(failed, "; ")
}

// runKubeAPIServer runs the real apiserver until ctx ends, then stops it
// (SIGTERM, and SIGKILL after kubeAPIServerStopTimeout). It waits for the
// etcd member to be a voter before each start, and restarts the process
// when it exits: at once after it had served, with a growing backoff
// while it keeps exiting before serving; the latter is reported as
// APIServerRefused with the process's own error (e.g. "unknown flag").
func (n *node) runKubeAPIServer(ctx context.Context, k *kubeAPIServer) {
	backoff := time.Second
	for {
		if !n.waitEtcdVoter(ctx) {
			return
		}
		exitErr, stopped := n.runKubeAPIServerOnce(ctx, k)
		if stopped {
			return
		}
		k.mu.Lock()
		served := k.served
		k.mu.Unlock()
		n.mu.Lock()
		if served {
			n.apiState, n.apiErr = nodeapi.APIServerStopped, exitErr
			backoff = time.Second
		} else {
			n.apiState, n.apiErr = nodeapi.APIServerRefused, exitErr
		}
		n.mu.Unlock()
		n.poke()
		n.log.Error("kube-apiserver exited; restarting", "err", exitErr, "served", served, "backoff", backoff, "log", k.logPath)
		if !ctxutil.Sleep(ctx, backoff) {
			return
		}
		if !served {
			backoff = min(2*backoff, maxRestartBackoff)
		}
	}
}

// waitEtcdVoter polls until the local etcd member is a voter with a
// leader; false when ctx ends first.
func (n *node) waitEtcdVoter(ctx context.Context) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, _ := n.probeEtcd(ctx); ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// runKubeAPIServerOnce starts the process and waits for it to exit (its
// error) or for ctx to end (stopped: it was told to stop and has exited).
func (n *node) runKubeAPIServerOnce(ctx context.Context, k *kubeAPIServer) (exitErr string, stopped bool) {
	logFile, err := os.OpenFile(k.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Sprintf("open kube-apiserver log: %v", err), false
	}
	defer logFile.Close()
	tail := &exitReason{}
	cmd := exec.Command(k.bin, k.args...)
	cmd.Stdout = logFile
	cmd.Stderr = io.MultiWriter(logFile, tail)
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Sprintf("start kube-apiserver: %v", err), false
	}
	k.mu.Lock()
	k.pid, k.served = cmd.Process.Pid, false
	k.mu.Unlock()
	n.log.Info("kube-apiserver started", "pid", cmd.Process.Pid, "binary", k.bin, "log", k.logPath)
	n.poke()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		k.mu.Lock()
		k.pid = 0
		k.mu.Unlock()
		n.poke()
	}()
	select {
	case err := <-done:
		return fmt.Sprintf("kube-apiserver (pid %d) exited: %v: %s", cmd.Process.Pid, err, tail.reason()), false
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	n.awaitKubeAPIServerExit(context.WithoutCancel(ctx), cmd.Process, done)
	n.log.Info("kube-apiserver stopped", "pid", cmd.Process.Pid)
	return "", true
}

// awaitKubeAPIServerExit waits for a SIGTERMed apiserver to exit: up to
// kubeAPIServerStopTimeout, but only DefaultShutdownDelay plus a few
// seconds while its etcd member cannot serve (a replica being deleted has
// had its member removed first: the apiserver's graceful shutdown would
// wait on storage that is gone). Then SIGKILL.
func (n *node) awaitKubeAPIServerExit(ctx context.Context, p *os.Process, done <-chan error) {
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		elapsed := time.Since(start)
		storageGone := false
		if elapsed > DefaultShutdownDelay+3*time.Second {
			ok, _ := n.probeEtcd(ctx)
			storageGone = !ok
		}
		if storageGone || elapsed > kubeAPIServerStopTimeout {
			n.log.Warn("kube-apiserver did not stop in time; killing it", "pid", p.Pid, "after", elapsed.Round(time.Millisecond), "etcd_member_unavailable", storageGone)
			_ = p.Kill()
			<-done
			return
		}
	}
}

// exitReason keeps what explains an apiserver's exit from its stderr: the
// last "Error: ..." line (flag errors, printed before the usage text) or
// klog fatal/error line, else the last line.
type exitReason struct {
	mu      sync.Mutex
	partial []byte
	errLine string
	last    string
}

func (e *exitReason) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partial = append(e.partial, p...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			break
		}
		e.line(string(e.partial[:i]))
		e.partial = e.partial[i+1:]
	}
	if len(e.partial) > 64<<10 { // a line without end: keep memory bounded
		e.line(string(e.partial))
		e.partial = nil
	}
	return len(p), nil
}

func (e *exitReason) line(l string) {
	l = strings.TrimSpace(l)
	if l == "" {
		return
	}
	e.last = l
	// klog: "F1123 22:31:02.123456   123 file.go:12] message"
	isKlog := func(sev byte) bool {
		return len(l) > 5 && l[0] == sev && l[1] >= '0' && l[1] <= '9'
	}
	if strings.HasPrefix(l, "Error: ") || isKlog('F') || (e.errLine == "" && isKlog('E')) {
		e.errLine = l
	}
}

func (e *exitReason) reason() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.partial) > 0 {
		e.line(string(e.partial))
		e.partial = nil
	}
	return cmp.Or(e.errLine, e.last, "(no output)")
}

// probeKubeAPIServer is the readiness check with the real apiserver: its
// own /readyz (etcd included). An answer marks it serving.
func (n *node) probeKubeAPIServer(ctx context.Context) (bool, string) {
	serving, ready, reason := n.kapi.Load().checkReady(ctx)
	if serving {
		n.mu.Lock()
		changed := n.apiState != nodeapi.APIServerServing
		n.apiState, n.apiErr = nodeapi.APIServerServing, ""
		n.mu.Unlock()
		if changed {
			n.log.Info("kube-apiserver serves", "addr", n.cfg.APIServerAddress())
			n.poke()
		}
	}
	return ready, reason
}
