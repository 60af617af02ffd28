package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/wait"
)

// KVPrefix is the etcd key prefix of the /kv/{key} endpoint.
const KVPrefix = "/registry/hamaster-kv/"

const (
	readyCacheTTL    = 200 * time.Millisecond
	readyReadTimeout = time.Second
	kvTimeout        = 5 * time.Second
	maxKVValueBytes  = 1536 * 1024 // etcd's default --max-request-bytes
)

// readiness caches the answer of the etcd readiness check.
type readiness struct {
	mu     sync.Mutex
	at     time.Time
	ok     bool
	reason string
}

// checkReady reports whether the local etcd member is healthy and voting:
// running, not a learner, with a leader, and a linearizable read through it
// succeeds within readyReadTimeout. Answers are cached for readyCacheTTL.
func (n *node) checkReady(ctx context.Context) (bool, string) {
	r := &n.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < readyCacheTTL {
		return r.ok, r.reason
	}
	// A caller that goes away must not cache a failure for the others.
	if n.kapi.Load() != nil {
		r.ok, r.reason = n.probeKubeAPIServer(context.WithoutCancel(ctx))
	} else {
		r.ok, r.reason = n.probeEtcd(context.WithoutCancel(ctx))
	}
	r.at = time.Now()
	return r.ok, r.reason
}

// cachedReady returns the last readiness answer without probing.
func (n *node) cachedReady() (bool, string) {
	n.ready.mu.Lock()
	defer n.ready.mu.Unlock()
	if n.ready.at.IsZero() {
		return false, "not checked yet"
	}
	return n.ready.ok, n.ready.reason
}

func (n *node) probeEtcd(ctx context.Context) (bool, string) {
	state, errText, srv, cli := n.etcd.snapshot()
	if state != nodeapi.EtcdRunning || srv == nil || cli == nil {
		if errText != "" {
			return false, fmt.Sprintf("etcd is %s: %s", state, errText)
		}
		return false, "etcd is " + state
	}
	if srv.IsLearner() {
		return false, "etcd member is a learner (not voting)"
	}
	ctx, cancel := context.WithTimeout(ctx, readyReadTimeout)
	defer cancel()
	// A member between two leaders (a leadership transfer takes one round
	// trip) waits for the next within the read's timeout, as kube-apiserver's
	// etcd readiness check does: it is a plain read bounded by
	// --etcd-readycheck-timeout (k8s.io/apiserver storagebackend/factory
	// etcd3.go), never an instant "no leader" verdict. Answering at once
	// failed clients through the LB while rotate-certs and upgrades moved
	// leadership on a busy machine.
	if wait.Until(ctx, 25*time.Millisecond, "a leader", func() (bool, error) { return srv.Leader() != 0, nil }) != nil {
		return false, "etcd member has no leader"
	}
	// Retried while leadership moves, as /kv reads are: a member that
	// answers once the new leader is known can serve (seen as a burst of
	// "leader changed" 503s through the LB while rotate-certs moved
	// leadership off a replica).
	if _, err := getRetryingLeaderChange(ctx, cli, "health"); err != nil {
		return false, "etcd linearizable read failed: " + err.Error()
	}
	return true, ""
}

// handler is the control-plane stand-in's HTTP API.
func (n *node) handler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /livez", ok)
	mux.HandleFunc("GET /readyz", n.serveReadyz)
	mux.HandleFunc("GET /version", n.serveVersion)
	mux.Handle("GET /kv/{key...}", n.limit(false, http.HandlerFunc(n.serveKVGet)))
	mux.Handle("PUT /kv/{key...}", n.limit(true, http.HandlerFunc(n.serveKVPut)))
	mux.Handle("DELETE /kv/{key...}", n.limit(true, http.HandlerFunc(n.serveKVDelete)))
	// Health and version are open, as on a real apiserver; every other
	// path (the /kv API, and anything unknown) needs a client certificate.
	authed := requireClientCert(mux)
	open := map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}
	return n.observe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open[r.URL.Path] {
			mux.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	}))
}

func (n *node) serveReadyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if n.shuttingDown.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "shutting down")
		return
	}
	if ok, reason := n.checkReady(r.Context()); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, reason)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// VersionInfo is what GET /version answers, as the real apiserver does.
type VersionInfo struct {
	Major      string `json:"major"`
	Minor      string `json:"minor"`
	GitVersion string `json:"gitVersion"`
	GoVersion  string `json:"goVersion"`
	Compiler   string `json:"compiler"`
	Platform   string `json:"platform"`
}

func versionInfo(kubeVersion string) VersionInfo {
	v := VersionInfo{GitVersion: kubeVersion, GoVersion: runtime.Version(), Compiler: runtime.Compiler,
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if m := kubeVersionRE.FindStringSubmatch(kubeVersion); m != nil {
		v.Major, v.Minor = m[1], m[2]
	}
	return v
}

func (n *node) serveVersion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(versionInfo(n.cfg.KubeVersion))
}

// kvClient returns the etcd client once the member runs, else writes 503.
func (n *node) kvClient(w http.ResponseWriter, r *http.Request) (*clientv3.Client, string, bool) {
	key := r.PathValue("key")
	if key == "" {
		http.Error(w, "empty key: use /kv/{key}", http.StatusBadRequest)
		return nil, "", false
	}
	// Like a real apiserver, a request is served whenever storage answers:
	// /readyz is the LB's signal, not a per-request gate (a leader
	// transfer makes /readyz fail for a moment while the etcd client's
	// own retries still get the request through). A learner's data may be
	// behind, so a learner serves nothing.
	state, errText, srv, cli := n.etcd.snapshot()
	switch {
	case state != nodeapi.EtcdRunning || srv == nil || cli == nil:
		http.Error(w, "etcd not ready: etcd is "+state+" "+errText, http.StatusServiceUnavailable)
		return nil, "", false
	case srv.IsLearner():
		http.Error(w, "etcd not ready: etcd member is a learner (not voting)", http.StatusServiceUnavailable)
		return nil, "", false
	}
	return cli, KVPrefix + key, true
}

// kvCall runs op with the member's client and the key once kvClient
// allows, within the KV timeout, and answers 503 for op's error and 404
// when op found nothing; true when the caller is to write the answer.
func (n *node) kvCall(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, cli *clientv3.Client, key string) (found bool, err error)) bool {
	cli, key, ok := n.kvClient(w, r)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.kvTimeout())
	defer cancel()
	found, err := op(ctx, cli, key)
	if err != nil {
		http.Error(w, "etcd: "+err.Error(), http.StatusServiceUnavailable)
		return false
	}
	if !found {
		http.Error(w, "not found", http.StatusNotFound)
		return false
	}
	return true
}

func (n *node) serveKVGet(w http.ResponseWriter, r *http.Request) {
	var resp *clientv3.GetResponse
	if !n.kvCall(w, r, func(ctx context.Context, cli *clientv3.Client, key string) (bool, error) {
		var err error
		resp, err = getRetryingLeaderChange(ctx, cli, key)
		return err == nil && len(resp.Kvs) > 0, err
	}) {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Etcd-Mod-Revision", strconv.FormatInt(resp.Kvs[0].ModRevision, 10))
	_, _ = w.Write(resp.Kvs[0].Value)
}

// getRetryingLeaderChange is a linearizable Get that, like the apiserver's
// storage layer, retries while etcd's leadership is moving (a read is safe
// to repeat; a write is not, and is never retried here).
func getRetryingLeaderChange(ctx context.Context, cli *clientv3.Client, key string) (*clientv3.GetResponse, error) {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := cli.Get(ctx, key)
		if err == nil || !leaderChanging(err) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-tick.C:
		}
	}
}

// retryUnproposed runs write again while etcd refuses it before it
// entered the raft log: "raft proposal dropped" (raft.ErrProposalDropped,
// while leadership moves) and "no leader" (refused before proposing).
// Neither was applied, so repeating is safe; any other error, a timeout
// among them (it may have been applied), is returned as it is.
func retryUnproposed(ctx context.Context, write func() error) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		err := write()
		if err == nil || !unproposed(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// unproposed reports whether etcd refused a write before proposing it.
// raft.ErrProposalDropped reaches the client as an untyped gRPC error, so
// it is matched by its text.
func unproposed(err error) bool {
	return errors.Is(err, rpctypes.ErrNoLeader) || strings.Contains(err.Error(), "raft proposal dropped")
}

func leaderChanging(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeout) ||
		strings.Contains(err.Error(), rpctypes.ErrLeaderChanged.Error())
}

func (n *node) serveKVPut(w http.ResponseWriter, r *http.Request) {
	cli, key, ok := n.kvClient(w, r)
	if !ok {
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxKVValueBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("value larger than %d bytes", maxKVValueBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.kvTimeout())
	defer cancel()
	var resp *clientv3.PutResponse
	err = retryUnproposed(ctx, func() (err error) {
		resp, err = cli.Put(ctx, key, string(value))
		return err
	})
	if err != nil {
		http.Error(w, "etcd: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("X-Etcd-Mod-Revision", strconv.FormatInt(resp.Header.Revision, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

func (n *node) serveKVDelete(w http.ResponseWriter, r *http.Request) {
	if !n.kvCall(w, r, func(ctx context.Context, cli *clientv3.Client, key string) (bool, error) {
		var resp *clientv3.DeleteResponse
		err := retryUnproposed(ctx, func() (err error) {
			resp, err = cli.Delete(ctx, key)
			return err
		})
		return err == nil && resp.Deleted > 0, err
	}) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

func (n *node) kvTimeout() time.Duration {
	return min(n.opts.RequestTimeout, kvTimeout)
}

// limit applies --max-requests-inflight (or the mutating variant) like the
// real apiserver: over the limit, 429 at once.
func (n *node) limit(mutating bool, h http.Handler) http.Handler {
	size := n.opts.MaxRequestsInflight
	if mutating {
		size = n.opts.MaxMutatingRequestsInflight
	}
	if size == 0 {
		return h
	}
	sem := make(chan struct{}, size)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
		}
	})
}

// statusRecorder captures the response code for logging and auditing.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// auditEvent is one line of the --audit-log-path file.
type auditEvent struct {
	Time       time.Time `json:"requestReceivedTimestamp"`
	Verb       string    `json:"verb"`
	RequestURI string    `json:"requestURI"`
	SourceIP   string    `json:"sourceIP"`
	Code       int       `json:"code"`
	LatencyMS  float64   `json:"latencyMs"`
}

// observe logs requests (at --v=3 and up) and writes the audit log.
func (n *node) observe(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		if n.opts.Verbosity >= 3 {
			n.log.Info("request", "method", r.Method, "uri", r.RequestURI, "code", rec.code,
				"remote", r.RemoteAddr, "latency", time.Since(start))
		}
		if n.audit != nil {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			ev := auditEvent{Time: start.UTC(), Verb: strings.ToLower(r.Method), RequestURI: r.RequestURI,
				SourceIP: host, Code: rec.code, LatencyMS: float64(time.Since(start).Microseconds()) / 1000}
			n.writeAudit(ev)
		}
	})
}

func (n *node) writeAudit(ev auditEvent) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	n.auditMu.Lock()
	defer n.auditMu.Unlock()
	if _, err := n.audit.Write(append(b, '\n')); err != nil {
		n.log.Warn("audit log write failed", "err", err)
	}
}

// openAudit opens --audit-log-path ("-" is stdout).
func openAudit(path string) (io.WriteCloser, error) {
	if path == "-" {
		return nopCloser{os.Stdout}, nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return f, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// bind starts serving HTTPS on addr (with the real apiserver: forwarding
// addr to it). The caller holds n.mu.
func (n *node) bind(addr string) error {
	if n.kapi.Load() != nil {
		p, err := startTCPProxy(addr, n.cfg.APIServerAddress())
		if err != nil {
			return err
		}
		n.proxies[addr] = p
		n.log.Info("forwarding to kube-apiserver", "addr", addr, "to", n.cfg.APIServerAddress())
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           n.httpHandler,
		TLSConfig:         n.tlsConfig.Clone(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
	n.servers[addr] = srv
	n.serveWG.Go(func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("apiserver listener stopped", "addr", addr, "err", err)
		}
	})
	n.log.Info("apiserver listening", "addr", addr)
	return nil
}

// unbind stops serving on addr at once: the listener and every connection
// accepted on it are closed, so another process can bind addr right after.
// The caller holds n.mu.
func (n *node) unbind(addr string) {
	if p := n.proxies[addr]; p != nil {
		delete(n.proxies, addr)
		_ = p.Close()
		n.log.Info("stopped forwarding to kube-apiserver", "addr", addr)
		return
	}
	srv := n.servers[addr]
	if srv == nil {
		return
	}
	delete(n.servers, addr)
	if err := srv.Close(); err != nil {
		n.log.Warn("close apiserver listener", "addr", addr, "err", err)
	}
	n.log.Info("apiserver stopped listening", "addr", addr)
}

// loadTLS loads the apiserver serving certificate.
func loadTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load %s/%s: %w", nodeapi.KeyAPIServerCert, nodeapi.KeyAPIServerKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
