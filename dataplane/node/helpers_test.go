package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/loopbacktest"
)

// testPKI is the project's PKI (package certs) for a replica on
// 127.0.0.1 whose static IP is 127.0.0.2, written to files.
type testPKI struct {
	CACert                string
	PeerCert, PeerKey     string
	ServerCert, ServerKey string
	APICert, APIKey       string
	Pool                  *x509.CertPool
	Client                tls.Certificate // etcd client certificate
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	ca, err := certs.NewCA("test-etcd-ca", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{
		CACert:     filepath.Join(dir, "ca.crt"),
		PeerCert:   filepath.Join(dir, "peer.crt"),
		PeerKey:    filepath.Join(dir, "peer.key"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
		APICert:    filepath.Join(dir, "apiserver.crt"),
		APIKey:     filepath.Join(dir, "apiserver.key"),
		Pool:       ca.Pool(),
	}
	if err := ca.Write(p.CACert, filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	req := certs.Request{CommonName: "test-node", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.2")}}
	issue := []struct {
		name      string
		fn        func() (*certs.Pair, error)
		cert, key string
	}{
		{"etcd peer", func() (*certs.Pair, error) { return ca.IssueEtcdPeer(req) }, p.PeerCert, p.PeerKey},
		{"etcd server", func() (*certs.Pair, error) { return ca.IssueEtcdServer(req) }, p.ServerCert, p.ServerKey},
		{"apiserver", func() (*certs.Pair, error) {
			return ca.IssueAPIServer(certs.APIServerSANs{StaticIP: "127.0.0.2", ReplicaIPs: []string{"127.0.0.1"}}, certs.ECDSA, 0)
		}, p.APICert, p.APIKey},
	}
	for _, is := range issue {
		pair, err := is.fn()
		if err != nil {
			t.Fatalf("issue %s certificate: %v", is.name, err)
		}
		if err := pair.Write(is.cert, is.key); err != nil {
			t.Fatal(err)
		}
	}
	client, err := ca.IssueClient("test-client", nil, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	if p.Client, err = client.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort returns a TCP port that was free on ip (and on every address in
// also) a moment ago, below the kernel's ephemeral range
// (loopbacktest.PortOn).
func freePort(t *testing.T, ip string, also ...string) int {
	t.Helper()
	return loopbacktest.PortOn(t, append([]string{ip}, also...)...)
}

// loopbackAvailable reports whether this machine can bind ip (127.0.0.2
// works out of the box on Linux, not on macOS).
func loopbackAvailable(ip string) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// testConfig is a one-member TLS cluster on 127.0.0.1 with free ports.
func testConfig(t *testing.T, dir string, pki testPKI, name string) Config {
	t.Helper()
	return testConfigAt(t, dir, pki, name, "127.0.0.1")
}

// testConfigAt is a one-member TLS cluster on addr with free ports.
func testConfigAt(t *testing.T, dir string, pki testPKI, name, addr string) Config {
	t.Helper()
	c := Config{
		Name:                name,
		Address:             addr,
		InitialClusterState: nodeapi.ClusterStateNew,
		EtcdClientPort:      freePort(t, addr),
		EtcdPeerPort:        freePort(t, addr),
		APIServerPort:       freePort(t, addr),
		EtcdCACert:          pki.CACert,
		EtcdPeerCert:        pki.PeerCert,
		EtcdPeerKey:         pki.PeerKey,
		EtcdServerCert:      pki.ServerCert,
		EtcdServerKey:       pki.ServerKey,
		EtcdHeartbeat:       50 * time.Millisecond,
		EtcdElection:        500 * time.Millisecond,
		EtcdUnsafeNoFsync:   true,
		APIServerCert:       pki.APICert,
		APIServerKey:        pki.APIKey,
		KubeVersion:         "v1.30.2",
		DataDir:             filepath.Join(dir, "disk"),
		StaticIPFile:        filepath.Join(dir, "static-ip"),
		PIDFile:             filepath.Join(dir, "node.pid"),
		StatusFile:          filepath.Join(dir, "status.json"),
	}
	c.InitialCluster = c.Name + "=" + c.EtcdPeerURL()
	return c
}

// runningNode is a node.Run in a goroutine.
type runningNode struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan error
}

// startNode runs cfg until stop or the end of the test.
func startNode(t *testing.T, cfg Config) *runningNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runningNode{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() { rn.done <- Run(ctx, cfg, logger) }()
	t.Cleanup(func() { rn.stop(t) })
	return rn
}

// stop cancels the node and waits for Run to return (idempotent).
func (rn *runningNode) stop(t *testing.T) error {
	t.Helper()
	rn.cancel()
	select {
	case err, ok := <-rn.done:
		if ok {
			close(rn.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s did not stop within 30s", rn.cfg.Name)
		return nil
	}
}

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // the test may have ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds or timeout passes; the failure names
// the last reason.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, reason := cond()
		if ok {
			return
		}
		last = reason
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, last)
		}
		<-tick.C
	}
}

// waitStatus polls the node's status file until cond holds.
func waitStatus(t *testing.T, cfg Config, timeout time.Duration, what string, cond func(nodeapi.Status) bool) nodeapi.Status {
	t.Helper()
	var st nodeapi.Status
	waitFor(t, timeout, what, func() (bool, string) {
		s, err := nodeapi.ReadStatus(cfg.StatusFile)
		if err != nil {
			return false, err.Error()
		}
		st = s
		return cond(s), fmt.Sprintf("%+v", s)
	})
	return st
}

// waitRefused waits until the node reports its apiserver refused with
// etcd running, and checks that the apiserver's error names wantErr.
func waitRefused(t *testing.T, cfg Config, wantErr string) nodeapi.Status {
	t.Helper()
	st := waitStatus(t, cfg, startTimeout, "apiserver refused, etcd running", func(s nodeapi.Status) bool {
		return s.APIServer == nodeapi.APIServerRefused && s.Etcd == nodeapi.EtcdRunning
	})
	if !strings.Contains(st.APIServerError, wantErr) {
		t.Errorf("apiserver_error = %q, want it to contain %q", st.APIServerError, wantErr)
	}
	return st
}

// apiClient talks HTTPS to the apiserver stand-in without keep-alives.
func apiClient(pki testPKI) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
}

// do sends a request and returns the status code and body; err for
// transport errors.
func do(c *http.Client, method, url, body string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
