package lbproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/internal/loopbacktest"
	"github.com/hamaster/hamaster/internal/wait"
)

// testPKI is a CA (written to ca.crt in Dir, a test's own directory) and
// a serving certificate for 127.0.0.1, as the replicas' apiservers have.
type testPKI struct {
	Dir    string
	CAFile string
	Pool   *x509.CertPool
	Cert   tls.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.NewCA("test-ca", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{Dir: dir, CAFile: filepath.Join(dir, "ca.crt"), Pool: ca.Pool()}
	if err := ca.Write(p.CAFile, filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueAPIServer(certs.APIServerSANs{ReplicaIPs: []string{"127.0.0.1"}}, certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cert, err = pair.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// testBackend is an HTTPS server standing in for a replica's apiserver:
// /readyz answers 200 or 503 as the test sets it, /who answers its name.
type testBackend struct {
	name  string
	srv   *httptest.Server
	ready atomic.Bool
	hang  atomic.Bool // /readyz never answers (until the client gives up)
	// hanging counts the /readyz requests that arrived while hang was
	// set: a check hangs from the first.
	hanging atomic.Int32
}

func newBackend(t *testing.T, pki testPKI, name string, ready bool) *testBackend {
	t.Helper()
	b := &testBackend{name: name}
	b.ready.Store(ready)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if b.hang.Load() {
			b.hanging.Add(1)
			<-r.Context().Done()
			return
		}
		if !b.ready.Load() {
			http.Error(w, "etcd not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /who", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, name)
	})
	b.srv = httptest.NewUnstartedServer(mux)
	b.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake noise from health checks
	b.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Cert}, MinVersion: tls.VersionTLS12}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *testBackend) target() Target {
	return Target{Name: b.name, Address: b.srv.Listener.Addr().String()}
}

// testConfig is a fast-checking config for backends, changed by edit
// unless nil, and written to pki's directory.
func testConfig(t *testing.T, pki testPKI, edit func(*Config), backends ...*testBackend) (Config, string) {
	t.Helper()
	dir := pki.Dir
	cfg := Config{
		Listen: loopbacktest.Addr(t),
		Health: HealthConfig{
			Interval: Duration{50 * time.Millisecond},
			// A check's own limit, not how soon a change is seen (the
			// backends answer at once, or refuse): under the race tier's
			// load a loopback TLS check took over 1 s twice in a row, and
			// both targets of TestLBReload went unhealthy (CI, 0c58740).
			Timeout:            Duration{5 * time.Second},
			HealthyThreshold:   1,
			UnhealthyThreshold: 2,
			CAFile:             pki.CAFile,
		},
		StatusFile: filepath.Join(dir, "lb-status.json"),
		PIDFile:    filepath.Join(dir, "lb.pid"),
	}
	for _, b := range backends {
		cfg.Targets = append(cfg.Targets, b.target())
	}
	if edit != nil {
		edit(&cfg)
	}
	path := filepath.Join(dir, "lb.json")
	if err := WriteConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// runningLB is Run in a goroutine.
type runningLB struct {
	cancel context.CancelFunc
	done   chan error
	err    error
	exited bool
}

func startLB(t *testing.T, cfg Config, path string) *runningLB {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningLB{cancel: cancel, done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { r.done <- Run(ctx, cfg, path, logger) }()
	t.Cleanup(func() { r.stop(t) })
	waitStatus(t, cfg.StatusFile, "lb serving", func(s Status) bool { return s.Serving })
	return r
}

// stop cancels Run and waits for it (idempotent).
func (r *runningLB) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	if r.exited {
		return r.err
	}
	select {
	case r.err = <-r.done:
		r.exited = true
	case <-time.After(20 * time.Second):
		t.Fatal("lb did not stop within 20s")
	}
	return r.err
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // the test may have ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var reason string
	if err := wait.Until(ctx, 20*time.Millisecond, what, func() (ok bool, _ error) {
		ok, reason = cond()
		return ok, nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s: %s", what, reason)
	}
}

func waitStatus(t *testing.T, path, what string, cond func(Status) bool) Status {
	t.Helper()
	var st Status
	waitFor(t, what, func() (bool, string) {
		s, err := ReadStatus(path)
		if err != nil {
			return false, err.Error()
		}
		st = s
		return cond(s), fmt.Sprintf("%+v", s)
	})
	return st
}

// healthy reports whether every target in s was checked and exactly the
// named ones are healthy.
func healthy(s Status, names ...string) bool {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, tg := range s.Targets {
		if tg.Healthy != want[tg.Name] || tg.LastChecked.IsZero() {
			return false
		}
	}
	return true
}

// client makes one new TCP connection through the proxy per request.
func client(pki testPKI) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
}

// who asks the proxy which backend serves a new connection.
func who(c *http.Client, listen string) (string, error) {
	resp, err := c.Get("https://" + listen + "/who")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// whoCounts sends n requests and counts the answering backends.
func whoCounts(t *testing.T, c *http.Client, listen string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		name, err := who(c, listen)
		if err != nil {
			t.Fatalf("request through the proxy: %v", err)
		}
		got[name]++
	}
	return got
}

// persistentConn is one TLS connection through the proxy, used for several
// HTTP/1.1 requests.
type persistentConn struct {
	conn *tls.Conn
	br   *bufio.Reader
}

func dialPersistent(t *testing.T, pki testPKI, listen string) *persistentConn {
	t.Helper()
	conn, err := tls.Dial("tcp", listen, &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &persistentConn{conn: conn, br: bufio.NewReader(conn)}
}

func (p *persistentConn) who() (string, error) {
	_ = p.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(p.conn, "GET /who HTTP/1.1\r\nHost: lb\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// twoTargets is an LB on two healthy backends, "a" and "b", with a
// long-lived connection through it to first.
type twoTargets struct {
	pki   testPKI
	a, b  *testBackend
	cfg   Config
	path  string
	pc    *persistentConn
	first string
}

// startTwoTargets starts a twoTargets, its config changed by edit first
// unless nil.
func startTwoTargets(t *testing.T, edit func(*Config)) twoTargets {
	t.Helper()
	l := twoTargets{pki: newTestPKI(t)}
	l.a, l.b = newBackend(t, l.pki, "a", true), newBackend(t, l.pki, "b", true)
	l.cfg, l.path = testConfig(t, l.pki, edit, l.a, l.b)
	startLB(t, l.cfg, l.path)
	waitStatus(t, l.cfg.StatusFile, "both healthy", func(s Status) bool { return healthy(s, "a", "b") })
	l.pc = dialPersistent(t, l.pki, l.cfg.Listen)
	var err error
	if l.first, err = l.pc.who(); err != nil {
		t.Fatal(err)
	}
	return l
}
