package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testPKI is a CA and one certificate (server and client usage, valid for
// 127.0.0.1, 127.0.0.2 and localhost) written to files.
type testPKI struct {
	CACert, Cert, Key string
	Pool              *x509.CertPool
	KeyPair           tls.Certificate
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "test-node"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.2"), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{
		CACert: filepath.Join(dir, "ca.crt"),
		Cert:   filepath.Join(dir, "node.crt"),
		Key:    filepath.Join(dir, "node.key"),
		Pool:   x509.NewCertPool(),
	}
	p.Pool.AddCert(caCert)
	writePEM(t, p.CACert, "CERTIFICATE", caDER)
	writePEM(t, p.Cert, "CERTIFICATE", der)
	writePEM(t, p.Key, "EC PRIVATE KEY", keyDER)
	p.KeyPair, err = tls.LoadX509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a TCP port that was free on ip (and on every address in
// also) a moment ago.
func freePort(t *testing.T, ip string, also ...string) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		free := true
		for _, other := range also {
			l2, err := net.Listen("tcp", net.JoinHostPort(other, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			l2.Close()
		}
		ln.Close()
		if free {
			return port
		}
	}
	t.Fatal("no free port found")
	return 0
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
	c := Config{
		Name:                name,
		Address:             "127.0.0.1",
		InitialClusterState: ClusterStateNew,
		EtcdClientPort:      freePort(t, "127.0.0.1"),
		EtcdPeerPort:        freePort(t, "127.0.0.1"),
		APIServerPort:       freePort(t, "127.0.0.1"),
		EtcdCACert:          pki.CACert,
		EtcdPeerCert:        pki.Cert,
		EtcdPeerKey:         pki.Key,
		EtcdServerCert:      pki.Cert,
		EtcdServerKey:       pki.Key,
		EtcdHeartbeat:       50 * time.Millisecond,
		EtcdElection:        500 * time.Millisecond,
		EtcdUnsafeNoFsync:   true,
		APIServerCert:       pki.Cert,
		APIServerKey:        pki.Key,
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
func waitStatus(t *testing.T, cfg Config, timeout time.Duration, what string, cond func(Status) bool) Status {
	t.Helper()
	var st Status
	waitFor(t, timeout, what, func() (bool, string) {
		s, err := ReadStatus(cfg.StatusFile)
		if err != nil {
			return false, err.Error()
		}
		st = s
		return cond(s), fmt.Sprintf("%+v", s)
	})
	return st
}

// apiClient talks HTTPS to the apiserver stand-in without keep-alives.
func apiClient(pki testPKI) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS12},
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
