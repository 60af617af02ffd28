// Package etcdtest starts real, embedded etcd clusters for tests: members on
// 127.0.0.1 with random ports, fast raft timing (10ms heartbeat, 100ms
// election), no fsync and no logging, optionally with mTLS everywhere using
// certificates from hamaster's certs package. Strict reconfiguration checking
// stays on, as in production, so membership changes meet the same refusals
// (for instance "unhealthy cluster" for about 5s after members connect).
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/internal/loopbacktest"
	"github.com/hamaster/hamaster/internal/wait"
)

// Raft timing of test members.
const (
	TickMs     = 10
	ElectionMs = 100
)

// readyTimeout bounds how long Start and StartJoining wait for a member.
const readyTimeout = 30 * time.Second

// Options configure Start.
type Options struct {
	// TLS: https for clients and peers with client-certificate auth, the
	// certificates issued by a fresh CA from the certs package.
	TLS bool
	// Dir holds the members' data (and certificates); "" means t.TempDir().
	Dir string
}

// Cluster is a running test cluster. Members lists every node started by
// Start or StartJoining, including stopped ones.
type Cluster struct {
	Members []*Node
	// CAFile, ClientCertFile and ClientKeyFile are set with Options.TLS:
	// the CA that signed every certificate and a client pair it accepts.
	CAFile, ClientCertFile, ClientKeyFile string

	dir   string
	ca    *certs.CA
	token string
	mu    sync.Mutex
}

// Node is one etcd member.
type Node struct {
	Name      string
	ClientURL string
	PeerURL   string
	Etcd      *embed.Etcd
	Dir       string // data directory

	stopOnce sync.Once
}

// Start starts n members as a new cluster (initial-cluster-state new), named
// m-1 ... m-n, waits until every one is ready and registers their shutdown
// with t.Cleanup. It fails t on any error.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest.Start: need at least one member, got %d", n)
	}
	c := &Cluster{dir: opts.Dir, token: fmt.Sprintf("etcdtest-%d", time.Now().UnixNano())}
	if c.dir == "" {
		c.dir = t.TempDir()
	}
	t.Cleanup(c.stopAll)
	if opts.TLS {
		c.setupTLS(t)
	}
	type urls struct{ name, peer, client string }
	var us []urls
	var initial []string
	for i := range n {
		peer, client := c.FreeURLs(t)
		name := fmt.Sprintf("m-%d", i+1)
		us = append(us, urls{name, peer, client})
		initial = append(initial, name+"="+peer)
	}
	var nodes []*Node
	for _, u := range us {
		nodes = append(nodes, c.start(t, u.name, u.peer, u.client, strings.Join(initial, ","), embed.ClusterStateFlagNew))
	}
	for _, nd := range nodes {
		c.waitReady(t, nd)
	}
	return c
}

// StartJoining starts a member that joins the running cluster
// (initial-cluster-state existing), after it was added with
// etcdmember.Client.AddLearner (or a plain member add). initialCluster is
// the usual "name=peerURL,..." list of every member including the new one,
// as etcdmember.InitialCluster makes it. It
// waits until the member is ready, which for a learner means it has caught
// up enough to publish itself.
func (c *Cluster) StartJoining(t testing.TB, name, peerURL, clientURL string, initialCluster string) *Node {
	t.Helper()
	nd := c.start(t, name, peerURL, clientURL, initialCluster, embed.ClusterStateFlagExisting)
	c.waitReady(t, nd)
	return nd
}

// FreeURLs returns a peer and a client URL on 127.0.0.1 with ports that were
// free a moment ago (http, or https with Options.TLS).
func (c *Cluster) FreeURLs(t testing.TB) (peerURL, clientURL string) {
	t.Helper()
	scheme := "http"
	if c.ca != nil {
		scheme = "https"
	}
	return scheme + "://" + loopbacktest.Addr(t), scheme + "://" + loopbacktest.Addr(t)
}

// Endpoints returns the client URLs of the members that are not stopped.
func (c *Cluster) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eps []string
	for _, nd := range c.Members {
		if !nd.stopped() {
			eps = append(eps, nd.ClientURL)
		}
	}
	return eps
}

// ClientConfig returns an etcdmember.Config for the running members, with
// the client certificate under TLS and a 5 s status timeout: a stopped
// member refuses at once, and a busy host's TLS status call can take
// seconds (1 s left every voter unhealthy in .ci/run's race tier).
func (c *Cluster) ClientConfig() etcdmember.Config {
	return etcdmember.Config{
		Endpoints:     c.Endpoints(),
		CACert:        c.CAFile,
		Cert:          c.ClientCertFile,
		Key:           c.ClientKeyFile,
		StatusTimeout: 5 * time.Second,
	}
}

// Client connects to the running members (ClientConfig) and closes the
// client when the test ends.
func (c *Cluster) Client(ctx context.Context, t testing.TB) *etcdmember.Client {
	t.Helper()
	cli, err := etcdmember.New(ctx, c.ClientConfig())
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Node returns the member called name, or nil.
func (c *Cluster) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.Members {
		if nd.Name == name {
			return nd
		}
	}
	return nil
}

// Stop stops the member called name abruptly, as if its machine died (a
// down voter, as far as the others can tell); it fails t if there is none.
// Stopping twice is fine.
func (c *Cluster) Stop(t testing.TB, name string) {
	t.Helper()
	nd := c.Node(name)
	if nd == nil {
		t.Fatalf("etcdtest: no member %q", name)
	}
	nd.stop()
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	nodes := append([]*Node(nil), c.Members...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Go(nd.stop)
	}
	wg.Wait()
}

// stop stops the member abruptly, like a crash: without the leadership
// transfer a graceful stop attempts (which, with every member stopping at
// once, waits seconds for a transferee that is going away too).
func (nd *Node) stop() {
	nd.stopOnce.Do(func() {
		nd.Etcd.Server.HardStop()
		nd.Etcd.Close()
	})
}

// stopped reports whether the member was stopped by Stop or by etcd itself
// (as a removed member does).
func (nd *Node) stopped() bool {
	select {
	case <-nd.Etcd.Server.StopNotify():
		return true
	default:
		return false
	}
}

// joinHangGuard bounds how long a joining member is started again while
// the running members do not answer its version check (a hang guard: one
// retry is expected at most); joinRetryPause is the pause between starts.
const (
	joinHangGuard  = 2 * time.Minute
	joinRetryPause = 500 * time.Millisecond
)

func (c *Cluster) start(t testing.TB, name, peerURL, clientURL, initialCluster, state string) *Node {
	t.Helper()
	pu, err := url.Parse(peerURL)
	if err != nil {
		t.Fatalf("etcdtest: peer URL %q: %v", peerURL, err)
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		t.Fatalf("etcdtest: client URL %q: %v", clientURL, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = filepath.Join(c.dir, name)
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = state
	cfg.TickMs = TickMs
	cfg.ElectionMs = ElectionMs
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if c.ca != nil {
		cfg.ClientTLSInfo = c.issue(t, name, "server")
		cfg.PeerTLSInfo = c.issue(t, name, "peer")
	}
	// A member joining a running cluster asks the others for their
	// version first (etcd's bootstrap: isCompatibleWithCluster) and fails
	// with "incompatible with current running cluster" when none answered
	// it, as on a busy host (.ci/run's race tier); it is started again,
	// as the local provider's node restarts its member, within a hang
	// guard.
	var e *embed.Etcd
	ctx, cancel := context.WithTimeout(context.Background(), joinHangGuard)
	defer cancel()
	werr := wait.Until(ctx, joinRetryPause, "etcdtest: "+name+" started", func() (bool, error) {
		e, err = embed.StartEtcd(cfg)
		if err != nil && state == embed.ClusterStateFlagExisting && strings.Contains(err.Error(), "incompatible with current running cluster") {
			return false, os.RemoveAll(cfg.Dir) // what the failed bootstrap opened
		}
		return true, nil
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		t.Fatalf("etcdtest: start %s (peer %s, client %s): %v", name, peerURL, clientURL, err)
	}
	nd := &Node{Name: name, ClientURL: clientURL, PeerURL: peerURL, Etcd: e, Dir: cfg.Dir}
	c.mu.Lock()
	c.Members = append(c.Members, nd)
	c.mu.Unlock()
	return nd
}

func (c *Cluster) waitReady(t testing.TB, nd *Node) {
	t.Helper()
	select {
	case <-nd.Etcd.Server.ReadyNotify():
	case err := <-nd.Etcd.Err():
		t.Fatalf("etcdtest: %s failed: %v", nd.Name, err)
	case <-nd.Etcd.Server.StopNotify():
		t.Fatalf("etcdtest: %s stopped before becoming ready", nd.Name)
	case <-time.After(readyTimeout):
		t.Fatalf("etcdtest: %s not ready after %s", nd.Name, readyTimeout)
	}
}

func (c *Cluster) setupTLS(t testing.TB) {
	t.Helper()
	ca, err := certs.NewCA("etcdtest-ca", certs.ECDSA, 0)
	if err != nil {
		t.Fatalf("etcdtest: CA: %v", err)
	}
	c.ca = ca
	c.CAFile = filepath.Join(c.dir, "pki", "ca.crt")
	if err := ca.Write(c.CAFile, filepath.Join(c.dir, "pki", "ca.key")); err != nil {
		t.Fatalf("etcdtest: write CA: %v", err)
	}
	client, err := ca.IssueClient("etcdtest-client", nil, certs.ECDSA)
	if err != nil {
		t.Fatalf("etcdtest: client certificate: %v", err)
	}
	c.ClientCertFile = filepath.Join(c.dir, "pki", "client.crt")
	c.ClientKeyFile = filepath.Join(c.dir, "pki", "client.key")
	if err := client.Write(c.ClientCertFile, c.ClientKeyFile); err != nil {
		t.Fatalf("etcdtest: write client certificate: %v", err)
	}
}

// issue writes a server or peer certificate for member name, valid for
// 127.0.0.1 and localhost, and returns etcd's TLS settings for it.
func (c *Cluster) issue(t testing.TB, name, kind string) transport.TLSInfo {
	t.Helper()
	req := certs.Request{CommonName: name, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	var (
		p   *certs.Pair
		err error
	)
	if kind == "peer" {
		p, err = c.ca.IssueEtcdPeer(req)
	} else {
		p, err = c.ca.IssueEtcdServer(req)
	}
	if err != nil {
		t.Fatalf("etcdtest: %s certificate for %s: %v", kind, name, err)
	}
	certFile := filepath.Join(c.dir, "pki", name+"-"+kind+".crt")
	keyFile := filepath.Join(c.dir, "pki", name+"-"+kind+".key")
	if err := p.Write(certFile, keyFile); err != nil {
		t.Fatalf("etcdtest: write %s certificate for %s: %v", kind, name, err)
	}
	return transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: c.CAFile, ClientCertAuth: true}
}
