package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/certs/certstest"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/fsutil"
)

const startTimeout = 30 * time.Second

func apiURL(cfg Config, path string) string {
	return "https://" + cfg.APIServerAddress() + path
}

// waitReady waits until /readyz answers 200.
func waitReady(t *testing.T, cfg Config, pki testPKI) {
	t.Helper()
	c := apiClient(pki)
	waitFor(t, startTimeout, "/readyz 200", func() (bool, string) {
		code, body, err := do(c, "GET", apiURL(cfg, "/readyz"), "")
		if err != nil {
			return false, err.Error()
		}
		return code == 200, strconv.Itoa(code) + " " + body
	})
}

func TestNodeServesAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	cfg := testConfig(t, dir, pki, "serve-0")
	rn := startNode(t, cfg)
	waitReady(t, cfg, pki)
	c := apiClient(pki)

	cases := []struct {
		name, method, path, body string
		wantCode                 int
		wantBody                 string // substring
	}{
		{"healthz", "GET", "/healthz", "", 200, "ok"},
		{"livez", "GET", "/livez", "", 200, "ok"},
		{"readyz", "GET", "/readyz", "", 200, "ok"},
		{"version", "GET", "/version", "", 200, `"gitVersion":"v1.30.2"`},
		{"kv missing", "GET", "/kv/nope", "", 404, "not found"},
		{"kv put", "PUT", "/kv/greeting/nested", "hello", 200, "ok"},
		{"kv get", "GET", "/kv/greeting/nested", "", 200, "hello"},
		{"kv overwrite", "PUT", "/kv/greeting/nested", "bye", 200, "ok"},
		{"kv get again", "GET", "/kv/greeting/nested", "", 200, "bye"},
		{"kv delete", "DELETE", "/kv/greeting/nested", "", 200, "ok"},
		{"kv gone", "GET", "/kv/greeting/nested", "", 404, "not found"},
		{"kv empty key", "GET", "/kv/", "", 400, "empty key"},
		{"unknown path", "GET", "/api/v1/pods", "", 404, ""},
		{"wrong method", "POST", "/healthz", "", 405, ""},
	}
	for _, tc := range cases { // sequential: the kv cases build on each other
		code, body, err := do(c, tc.method, apiURL(cfg, tc.path), tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: %s %s = %d %q, want %d containing %q", tc.name, tc.method, tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}

	// Without a client certificate only the health paths answer, as on a
	// real apiserver.
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	for _, tc := range []struct {
		method, path string
		wantCode     int
	}{
		{"GET", "/healthz", 200}, {"GET", "/livez", 200}, {"GET", "/readyz", 200}, {"GET", "/version", 200},
		{"GET", "/kv/greeting", 401}, {"PUT", "/kv/greeting", 401}, {"DELETE", "/kv/greeting", 401}, {"GET", "/api/v1/pods", 401},
	} {
		code, body, err := do(anon, tc.method, apiURL(cfg, tc.path), "x")
		if err != nil || code != tc.wantCode {
			t.Errorf("anonymous %s %s = %d %q %v, want %d", tc.method, tc.path, code, body, err, tc.wantCode)
		}
	}

	_, body, err := do(c, "GET", apiURL(cfg, "/version"), "")
	if err != nil {
		t.Fatal(err)
	}
	var v VersionInfo
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("version %q: %v", body, err)
	}
	if v.Major != "1" || v.Minor != "30" || v.GitVersion != "v1.30.2" || v.Platform == "" {
		t.Errorf("version = %+v", v)
	}

	st := waitStatus(t, cfg, 5*time.Second, "status running+ready", func(s nodeapi.Status) bool {
		return s.Etcd == nodeapi.EtcdRunning && s.Ready
	})
	want := nodeapi.Status{PID: os.Getpid(), Name: "serve-0", Etcd: nodeapi.EtcdRunning, APIServer: nodeapi.APIServerServing,
		Ready: true, Listeners: []string{cfg.APIServerAddress()}, Version: "v1.30.2"}
	st.Updated = time.Time{}
	if !equalStatus(st, want) {
		t.Errorf("status = %+v, want %+v", st, want)
	}
	pid, err := os.ReadFile(cfg.PIDFile)
	if err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("pid file = %q, %v", pid, err)
	}

	if err := rn.stop(t); err != nil {
		t.Fatalf("Run returned %v, want nil on a clean stop", err)
	}
	if _, err := os.Stat(cfg.PIDFile); !os.IsNotExist(err) {
		t.Errorf("pid file still there after a clean stop: %v", err)
	}
	final, err := nodeapi.ReadStatus(cfg.StatusFile)
	if err != nil {
		t.Fatal(err)
	}
	if final.Etcd != nodeapi.EtcdStopped || final.APIServer != nodeapi.APIServerStopped || len(final.Listeners) != 0 || final.Ready {
		t.Errorf("final status = %+v, want etcd and apiserver stopped, no listeners", final)
	}
	if ln, err := net.Listen("tcp", cfg.APIServerAddress()); err != nil {
		t.Errorf("apiserver port still bound after stop: %v", err)
	} else {
		ln.Close()
	}
}

func equalStatus(a, b nodeapi.Status) bool {
	return a.PID == b.PID && a.Name == b.Name && a.Etcd == b.Etcd && a.EtcdError == b.EtcdError &&
		a.APIServer == b.APIServer && a.APIServerError == b.APIServerError && a.Ready == b.Ready &&
		slices.Equal(a.Listeners, b.Listeners) && a.StaticIP == b.StaticIP &&
		a.StaticIPError == b.StaticIPError && a.Version == b.Version
}

func TestNodeBadExtraArgsRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, args, wantErr string
	}{
		{"unknown flag", "--v=2 --no-such-flag=1", "unknown flag: --no-such-flag"},
		{"bad int", "--max-requests-inflight=lots", `invalid argument "lots" for "--max-requests-inflight" flag`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pki := newTestPKI(t, dir)
			cfg := testConfig(t, dir, pki, "refused-0")
			cfg.APIServerExtraArgs = tc.args
			startNode(t, cfg)
			st := waitRefused(t, cfg, tc.wantErr)
			if len(st.Listeners) != 0 || st.Ready {
				t.Errorf("refused apiserver: listeners %v ready %v, want none and false", st.Listeners, st.Ready)
			}
			if conn, err := net.DialTimeout("tcp", cfg.APIServerAddress(), time.Second); err == nil {
				conn.Close()
				t.Errorf("something listens on %s although the apiserver was refused", cfg.APIServerAddress())
			}
			// etcd keeps serving: a client can write through it.
			cli := etcdClient(t, cfg, pki)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "/still-alive", "yes"); err != nil {
				t.Errorf("etcd put with apiserver refused: %v", err)
			}
		})
	}
}

// etcdClient connects to the node's etcd client URL.
func etcdClient(t *testing.T, cfg Config, pki testPKI) *clientv3.Client {
	t.Helper()
	cc := clientv3.Config{Endpoints: []string{cfg.EtcdClientURL()}, DialTimeout: 5 * time.Second}
	if cfg.EtcdTLS() {
		cc.TLS = &tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// requireLoopback skips only where the OS does not route all of
// 127.0.0.0/8 to lo (macOS without aliases); on Linux a missing address
// is a failure, never a skip.
func requireLoopback(t *testing.T, ip string) {
	t.Helper()
	if loopbackAvailable(ip) {
		return
	}
	if runtime.GOOS == "linux" {
		t.Fatalf("cannot bind %s although Linux routes all of 127.0.0.0/8 to lo", ip)
	}
	t.Skipf("cannot bind %s on %s (add it with: sudo ifconfig lo0 alias %s up)", ip, runtime.GOOS, ip)
}

func TestNodeStaticIPAttachDetach(t *testing.T) {
	t.Parallel()
	const staticIP = "127.0.0.2"
	requireLoopback(t, staticIP)
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	cfg := testConfig(t, dir, pki, "static-0")
	cfg.APIServerPort = freePort(t, "127.0.0.1", staticIP)
	staticAddr := net.JoinHostPort(staticIP, strconv.Itoa(cfg.APIServerPort))
	startNode(t, cfg)
	waitReady(t, cfg, pki)
	c := apiClient(pki)

	steps := []struct {
		name      string
		file      string // content of STATIC_IP_FILE; "-" removes it
		listeners []string
		wantErr   string
	}{
		{"attach", staticIP + "\n", []string{cfg.APIServerAddress(), staticAddr}, ""},
		{"detach by emptying", "", []string{cfg.APIServerAddress()}, ""},
		{"attach again", staticIP, []string{cfg.APIServerAddress(), staticAddr}, ""},
		{"detach by removing", "-", []string{cfg.APIServerAddress()}, ""},
		{"not loopback", "10.1.2.3", []string{cfg.APIServerAddress()}, "loopback"},
		{"two IPs", "127.0.0.2 127.0.0.3", []string{cfg.APIServerAddress()}, "zero or one IP"},
	}
	for _, s := range steps { // sequential: each step starts from the last
		if s.file == "-" {
			if err := os.Remove(cfg.StaticIPFile); err != nil {
				t.Fatal(err)
			}
		} else if err := fsutil.ReplaceFile(cfg.StaticIPFile, []byte(s.file), 0o644); err != nil {
			t.Fatal(err)
		}
		st := waitStatus(t, cfg, 5*time.Second, s.name, func(st nodeapi.Status) bool {
			return slices.Equal(st.Listeners, s.listeners) && strings.Contains(st.StaticIPError, s.wantErr) &&
				(s.wantErr != "") == (st.StaticIPError != "")
		})
		attached := slices.Contains(st.Listeners, staticAddr)
		code, body, err := do(c, "GET", "https://"+staticAddr+"/healthz", "")
		switch {
		case attached && (err != nil || code != 200):
			t.Errorf("%s: GET /healthz on the static IP = %d %q %v, want 200", s.name, code, body, err)
		case !attached && err == nil:
			t.Errorf("%s: static IP detached but GET /healthz on it answered %d", s.name, code)
		}
		if !attached {
			// Another process can take the address right away.
			ln, err := net.Listen("tcp", staticAddr)
			if err != nil {
				t.Errorf("%s: bind %s after detach: %v", s.name, staticAddr, err)
			} else {
				ln.Close()
			}
		}
	}
}

func TestNodeRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	cfg := testConfig(t, dir, pki, "restart-0")
	c := apiClient(pki)

	first := startNode(t, cfg)
	waitReady(t, cfg, pki)
	if code, body, err := do(c, "PUT", apiURL(cfg, "/kv/durable"), "survives"); err != nil || code != 200 {
		t.Fatalf("put: %d %q %v", code, body, err)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	// Same DATA_DIR, new process; the flags say "new" but etcd ignores the
	// initial-cluster flags once it has data.
	startNode(t, cfg)
	waitReady(t, cfg, pki)
	code, body, err := do(c, "GET", apiURL(cfg, "/kv/durable"), "")
	if err != nil || code != 200 || body != "survives" {
		t.Fatalf("get after restart: %d %q %v, want 200 \"survives\"", code, body, err)
	}
}

func TestNodeShutdownDelay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	cfg := testConfig(t, dir, pki, "delay-0")
	// The window in which the test must see the delay: 6 s (on a busy
	// race tier the first read can come later than 1.5 s).
	cfg.APIServerExtraArgs = "--shutdown-delay-duration=6s"
	rn := startNode(t, cfg)
	waitReady(t, cfg, pki)
	c := apiClient(pki)

	stopped := make(chan error, 1)
	go func() {
		rn.cancel()
		stopped <- <-rn.done
	}()
	// During the delay: not ready, but still serving.
	waitFor(t, 5*time.Second, "/readyz 503 while /healthz 200", func() (bool, string) {
		rc, rb, rerr := do(c, "GET", apiURL(cfg, "/readyz"), "")
		hc, _, herr := do(c, "GET", apiURL(cfg, "/healthz"), "")
		if rerr != nil || herr != nil {
			t.Fatalf("listener closed before the shutdown delay ended: %v %v", rerr, herr)
		}
		return rc == 503 && strings.Contains(rb, "shutting down") && hc == 200, strconv.Itoa(rc) + " " + rb
	})
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the shutdown delay")
	}
	close(rn.done) // stop() in cleanup finds it closed
	if _, _, err := do(c, "GET", apiURL(cfg, "/healthz"), ""); err == nil {
		t.Error("apiserver still answers after Run returned")
	}
}

// TestNodeLearnerNotReady: a member added as a learner runs etcd but is not
// ready until promoted.
func TestNodeLearnerNotReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	a := testConfig(t, dir+"/a", pki, "learner-a")
	if err := os.MkdirAll(dir+"/a", 0o700); err != nil {
		t.Fatal(err)
	}
	startNode(t, a)
	waitReady(t, a, pki)

	b := testConfig(t, dir+"/b", pki, "learner-b")
	if err := os.MkdirAll(dir+"/b", 0o700); err != nil {
		t.Fatal(err)
	}
	// Both on 127.0.0.1: distinct ports keep them apart.
	b.InitialCluster = a.InitialCluster + "," + b.Name + "=" + b.EtcdPeerURL()
	b.InitialClusterState = nodeapi.ClusterStateExisting

	cli := etcdClient(t, a, pki)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	added, err := cli.MemberAddAsLearner(ctx, []string{b.EtcdPeerURL()})
	if err != nil {
		t.Fatalf("add learner: %v", err)
	}
	startNode(t, b)
	c := apiClient(pki)
	waitStatus(t, b, startTimeout, "learner's etcd running", func(s nodeapi.Status) bool { return s.Etcd == nodeapi.EtcdRunning })
	waitFor(t, 5*time.Second, "learner /readyz 503", func() (bool, string) {
		code, body, err := do(c, "GET", apiURL(b, "/readyz"), "")
		if err != nil {
			return false, err.Error()
		}
		return code == 503 && strings.Contains(body, "learner"), strconv.Itoa(code) + " " + body
	})
	if code, body, _ := do(c, "GET", apiURL(b, "/kv/x"), ""); code != 503 {
		t.Errorf("kv on a learner = %d %q, want 503", code, body)
	}

	// Promote (retry while the learner catches up), then it is ready.
	waitFor(t, startTimeout, "promote learner", func() (bool, string) {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		_, err := cli.MemberPromote(pctx, added.Member.ID)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	waitReady(t, b, pki)
}

// TestNodeThreeMembersOwnAddresses runs a 3-member cluster, each member on
// its own loopback address with certificates naming only that address, as
// the local provider sets replicas up.
func TestNodeThreeMembersOwnAddresses(t *testing.T) {
	t.Parallel()
	ips := []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"}
	for _, ip := range ips {
		requireLoopback(t, ip)
	}
	dir := t.TempDir()
	ca, caFile := certstest.WriteCA(t, dir, "test-etcd-ca", 0)
	var cfgs []Config
	var members []string
	for i, ip := range ips {
		d := filepath.Join(dir, fmt.Sprintf("m-%d", i))
		req := certs.Request{CommonName: fmt.Sprintf("m-%d", i), IPs: []net.IP{net.ParseIP(ip)}}
		pki := testPKI{CACert: caFile,
			PeerCert: d + "/peer.crt", PeerKey: d + "/peer.key",
			ServerCert: d + "/server.crt", ServerKey: d + "/server.key",
			APICert: d + "/api.crt", APIKey: d + "/api.key"}
		peer, err := ca.IssueEtcdPeer(req)
		if err != nil {
			t.Fatal(err)
		}
		server, err := ca.IssueEtcdServer(req)
		if err != nil {
			t.Fatal(err)
		}
		api, err := ca.IssueAPIServer(certs.APIServerSANs{ReplicaIPs: ips}, certs.ECDSA, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []error{peer.Write(pki.PeerCert, pki.PeerKey), server.Write(pki.ServerCert, pki.ServerKey), api.Write(pki.APICert, pki.APIKey)} {
			if w != nil {
				t.Fatal(w)
			}
		}
		c := testConfigAt(t, d, pki, fmt.Sprintf("m-%d", i), ip)
		cfgs = append(cfgs, c)
		members = append(members, c.Name+"="+c.EtcdPeerURL())
	}
	var nodes []*runningNode
	for _, c := range cfgs {
		c.InitialCluster = strings.Join(members, ",")
		nodes = append(nodes, startNode(t, c))
	}
	pki := testPKI{Pool: ca.Pool()}
	client, err := ca.IssueClient("test-client", nil, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	if pki.Client, err = client.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs {
		waitReady(t, c, pki)
	}
	c := apiClient(pki)
	if code, body, err := do(c, "PUT", apiURL(cfgs[0], "/kv/shared"), "v1"); err != nil || code != 200 {
		t.Fatalf("put via m-0: %d %q %v", code, body, err)
	}
	// m-0 goes away; the other two keep quorum and the data.
	if err := nodes[0].stop(t); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs[1:] {
		waitFor(t, startTimeout, "read via "+cfg.Name, func() (bool, string) {
			code, body, err := do(c, "GET", apiURL(cfg, "/kv/shared"), "")
			if err != nil {
				return false, err.Error()
			}
			return code == 200 && body == "v1", strconv.Itoa(code) + " " + body
		})
	}
}

// TestNodeStopsWithoutQuorum: a member whose peers never come up stays
// "starting", is not ready, and still stops promptly.
func TestNodeStopsWithoutQuorum(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	cfg := testConfig(t, dir, pki, "alone-0")
	cfg.InitialCluster += ",absent=https://127.0.0.1:" + strconv.Itoa(freePort(t, "127.0.0.1"))
	rn := startNode(t, cfg)
	st := waitStatus(t, cfg, startTimeout, "apiserver serving", func(s nodeapi.Status) bool {
		return s.APIServer == nodeapi.APIServerServing && !s.Updated.IsZero()
	})
	if st.Etcd != nodeapi.EtcdStarting || st.Ready {
		t.Errorf("status %+v, want etcd starting and not ready", st)
	}
	code, body, err := do(apiClient(pki), "GET", apiURL(cfg, "/readyz"), "")
	if err != nil || code != 503 || !strings.Contains(body, "etcd is starting") {
		t.Errorf("/readyz = %d %q %v, want 503 etcd is starting", code, body, err)
	}
	start := time.Now()
	if err := rn.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Stopped cleanly (above); the time is only a hang guard: a member
	// without quorum must not hold the stop up waiting for one.
	d := time.Since(start)
	t.Logf("stopped in %v", d.Round(time.Millisecond))
	if d > 10*time.Second {
		t.Errorf("hang guard: stop returned only after %v (expected in milliseconds)", d)
	}
}
