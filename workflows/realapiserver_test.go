//go:build realapiserver

// The real-apiserver tier: built only with -tags realapiserver ('make
// test-real', run by .ci/run after 'make test'), which sets
// HAMASTER_REAL_APISERVER_DIR to the binaries 'make kube-apiserver' built.

package workflows_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// The real-apiserver tier: the same workflows against kube-apiserver
// v1.33.13 and v1.34.4 instead of the stand-in. It runs only when
// HAMASTER_REAL_APISERVER_DIR names the directory 'make kube-apiserver'
// filled (<dir>/<version>/kube-apiserver); .ci/run builds them and runs it
// after 'make test':
//
//	HAMASTER_REAL_APISERVER_DIR=~/.cache/hamaster/kube-apiserver go test -run '^TestRealAPIServer' ./workflows/

const (
	realOldVersion = "v1.33.13"
	realNewVersion = "v1.34.4"
	// leaseWait is a hang guard on how long the "kubernetes" endpoints
	// (built from the master leases) may lag a change: expected within
	// the lease TTL (15 s) plus one reconcile interval (10 s); 10 times
	// that, so that a loaded machine never fails the test.
	leaseWait = 250 * time.Second
)

func realAPIServerDir(t *testing.T) string {
	dir := os.Getenv("HAMASTER_REAL_APISERVER_DIR")
	if dir == "" {
		t.Fatal("HAMASTER_REAL_APISERVER_DIR is not set: run the real-apiserver tier with 'make test-real' (it builds the binaries first)")
	}
	for _, v := range []string{realOldVersion, realNewVersion} {
		if _, err := os.Stat(nodeapi.KubeAPIServerPath(dir, v)); err != nil {
			t.Fatalf("HAMASTER_REAL_APISERVER_DIR=%s: no kube-apiserver %s (%v); run 'make kube-apiserver'", dir, v, err)
		}
	}
	return dir
}

// startRealEnv is startEnv on a cluster whose masters run the real
// kube-apiserver.
func startRealEnv(t *testing.T, name string, d time.Duration) (*env, context.Context) {
	c := localtest.Up(t, name, localtest.Options{Version: realOldVersion, ControlPlane: nodeapi.ControlPlaneReal, KubeAPIServerDir: realAPIServerDir(t)})
	return newEnvOn(t, c, name).within(d)
}

// kubeAPI is a cluster-admin client of the Kubernetes API through the
// static IP (the LB once there is one); every request on a new connection
// so that the LB picks a backend for each.
type kubeAPI struct {
	base string
	c    *http.Client
	// cs is client-go's clientset on the same endpoint and credentials.
	cs *kubernetes.Clientset
}

func newKubeAPI(t *testing.T, e *env) *kubeAPI {
	t.Helper()
	pki := filepath.Join(e.c.Settings.StateDir, e.name, "pki")
	ca, err := certs.LoadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueClient("tier-admin", []string{"system:masters"}, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://%s:6443", e.c.Provider.Info().StaticIP)
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host:            base,
		Timeout:         10 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: pair.CertPEM, KeyData: pair.KeyPEM},
		// v1 Endpoints are deprecated for EndpointSlices since v1.33;
		// the "kubernetes" Endpoints is still what the reconciler writes.
		WarningHandler: rest.NoWarnings{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &kubeAPI{
		base: base,
		c: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		}},
		cs: cs,
	}
}

// endpoints are the addresses of the "kubernetes" service's Endpoints in
// default, read with client-go: what each apiserver publishes of itself
// (--advertise-address) through the lease reconciler.
func (k *kubeAPI) endpoints(ctx context.Context) ([]string, error) {
	ep, err := k.cs.CoreV1().Endpoints(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range ep.Subsets {
		for _, a := range s.Addresses {
			out = append(out, a.IP)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (k *kubeAPI) do(ctx context.Context, method, url string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, k.base+url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		return b, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func (k *kubeAPI) createConfigMap(ctx context.Context, name, value string) error {
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": name},
		"data":     map[string]string{"v": value},
	})
	_, err := k.do(ctx, http.MethodPost, "/api/v1/namespaces/default/configmaps", body, http.StatusCreated)
	return err
}

func (k *kubeAPI) configMap(ctx context.Context, name string) (string, error) {
	b, err := k.do(ctx, http.MethodGet, "/api/v1/namespaces/default/configmaps/"+name, nil, http.StatusOK)
	if err != nil {
		return "", err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(b, &cm); err != nil {
		return "", fmt.Errorf("configmap %s: %w", name, err)
	}
	return cm.Data["v"], nil
}

// masterLeases are the addresses the apiservers keep in etcd with
// --endpoint-reconciler-type=lease (/registry/masterleases/<ip>, with a
// TTL): what each apiserver writes into the "kubernetes" endpoints.
func (e *env) masterLeases(ctx context.Context) ([]string, error) {
	cli, err := e.c.Provider.Etcd(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	const prefix = "/registry/masterleases/"
	resp, err := cli.Raw().Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), prefix))
	}
	sort.Strings(out)
	return out, nil
}

// address is one replica's address.
func (e *env) address(ctx context.Context, name string) string {
	e.t.Helper()
	r, err := e.c.Provider.Instances().Get(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Address
}

// replicaAddresses are the addresses of the cluster's replicas.
func (e *env) replicaAddresses(ctx context.Context) []string {
	e.t.Helper()
	rs, err := e.c.Provider.Instances().List(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Address)
	}
	sort.Strings(out)
	return out
}

// waitEndpoints polls until the "kubernetes" Endpoints list exactly the
// replicas' addresses, within leaseWait; it returns how long that took.
func (e *env) waitEndpoints(ctx context.Context, k *kubeAPI, what string) time.Duration {
	e.t.Helper()
	return e.waitEndpointsFor(ctx, k, what, e.replicaAddresses(ctx))
}

// waitEndpointsFor polls until the "kubernetes" Endpoints list exactly
// want (read through the LB with client-go); on a timeout it says what
// the endpoints and the master leases in etcd held.
func (e *env) waitEndpointsFor(ctx context.Context, k *kubeAPI, what string, want []string) time.Duration {
	e.t.Helper()
	start := time.Now()
	var got []string
	var err error
	tick := time.NewTicker(250 * time.Millisecond) // polling the apiserver, an external process
	defer tick.Stop()
	for time.Since(start) < leaseWait {
		got, err = k.endpoints(ctx)
		if err == nil && slices.Equal(got, want) {
			e.t.Logf("%s: kubernetes endpoints = %v after %v", what, want, time.Since(start).Round(100*time.Millisecond))
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("%s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
	leases, lerr := e.masterLeases(ctx)
	e.t.Fatalf("%s: kubernetes endpoints %v (err %v), want %v within %v, a hang guard (master leases in etcd: %v, %v)", what, got, err, want, leaseWait, leases, lerr)
	return 0
}

// replicaVersions asks every replica's own /version.
func (e *env) replicaVersions(ctx context.Context, k *kubeAPI) map[string]string {
	e.t.Helper()
	rs, err := e.c.Provider.Instances().List(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		direct := &kubeAPI{base: e.c.Provider.APIServerURL(r), c: k.c}
		b, err := direct.do(ctx, http.MethodGet, "/version", nil, http.StatusOK)
		if err != nil {
			e.t.Errorf("%s /version: %v", r.Name, err)
			continue
		}
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			e.t.Errorf("%s /version: %v", r.Name, err)
		}
		out[r.Name] = v.GitVersion
	}
	return out
}

func TestRealAPIServerGrowShrinkLeases(t *testing.T) {
	t.Parallel()
	e, ctx := startRealEnv(t, "rgrow", 6*time.Minute)
	k := newKubeAPI(t, e)
	if err := k.createConfigMap(ctx, "before-grow", "1"); err != nil {
		t.Fatalf("create a ConfigMap on the single master: %v", err)
	}
	// The replicas live in 198.19.N.0/24 (local up's default for the
	// real apiserver): Endpoints validation (ValidateEndpointIP) refuses
	// loopback addresses, so 127.0.N.x would never be listed.
	if a := e.address(ctx, local.MasterName(e.name)); !strings.HasPrefix(a, "198.19.") {
		t.Fatalf("master-0 on %s; want the benchmark range 198.19.N.0/24", a)
	}
	e.waitEndpoints(ctx, k, "1 replica")
	names := e.grow(ctx, 2)
	e.waitEndpoints(ctx, k, "grown to 3")
	// A replica that dies (its node killed; its apiserver dies with it)
	// leaves the leases once its own expires, without anyone removing it.
	dead := names[2]
	pid, err := os.ReadFile(filepath.Join(e.c.Settings.StateDir, e.name, "replicas", dead, "node.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var nodePID int
	if _, err := fmt.Sscan(string(pid), &nodePID); err != nil {
		t.Fatalf("node.pid of %s: %v", dead, err)
	}
	var alive []string
	for _, r := range e.replicaAddresses(ctx) {
		if r != e.address(ctx, dead) {
			alive = append(alive, r)
		}
	}
	if err := syscall.Kill(nodePID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := e.waitEndpointsFor(ctx, k, dead+" killed", alive)
	t.Logf("the dead replica left the kubernetes endpoints %v after the kill (its lease expired)", took.Round(100*time.Millisecond))
	for i := len(names) - 1; i >= 1; i-- {
		if err := e.remove(ctx, names[i], nil); err != nil {
			t.Fatalf("remove %s: %v", names[i], err)
		}
		e.waitEndpoints(ctx, k, fmt.Sprintf("%s removed", names[i]))
	}
	if v, err := k.configMap(ctx, "before-grow"); err != nil || v != "1" {
		t.Errorf("ConfigMap written before 1→3→1: %q, %v", v, err)
	}
}

// load creates and reads ConfigMaps through the LB until stopped.
type load struct {
	workflowstest.Tally
	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(ctx context.Context, k *kubeAPI, workers int, prefix string) *load {
	l := &load{stop: make(chan struct{})}
	for w := 0; w < workers; w++ {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				name := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				err := k.createConfigMap(ctx, name, name)
				if err == nil {
					var v string
					if v, err = k.configMap(ctx, name); err == nil && v != name {
						err = fmt.Errorf("configmap %s reads %q", name, v)
					}
				}
				l.Record(err, 2) // a create and a read
			}
		})
	}
	return l
}

func (l *load) finish() { close(l.stop); l.wg.Wait() }

// TestRealAPIServerRollingUpgradeUnderLoad runs alone (not parallel: Go
// runs it before the parallel tests start, and make test-real runs one
// package at a time): what it measures is the clients' view, and on 2
// cores the other tests' apiservers once starved an etcd write past
// etcd's 7 s request timeout (ReqTimeout: 5 s + 2 election timeouts) in
// CI, a 500 that says nothing about hamaster (alone, it still can: such
// failures are logged, not counted against hamaster).
func TestRealAPIServerRollingUpgradeUnderLoad(t *testing.T) {
	e, ctx := startRealEnv(t, "rupg", 8*time.Minute)
	e.grow(ctx, 2)
	k := newKubeAPI(t, e)
	leader := e.leader(ctx)
	ld := startLoad(ctx, k, 2, "load")
	rec := &recorder{}
	start := time.Now()
	err := e.upgrade(ctx, workflows.UpgradeParams{Version: realNewVersion, DrainGrace: time.Second, HealthTimeout: 2 * time.Minute}, rec, nil)
	ld.finish()
	if err != nil {
		t.Fatalf("rolling-upgrade %s → %s: %v", realOldVersion, realNewVersion, err)
	}
	t.Logf("rolling-upgrade %s → %s of 3 replicas in %v under load through the LB: %d requests ok, %d failed",
		realOldVersion, realNewVersion, time.Since(start).Round(100*time.Millisecond), ld.OK.Load(), ld.Failed.Load())
	// Two failures are etcd's own verdicts, which kube-apiserver passes
	// on as a 500 without retrying:
	//   - "leader changed": a request in flight while etcd's leadership
	//     moves (hamaster moves it off the leader before recreating it).
	//     Counted and bounded by the moves one upgrade makes.
	//   - "request timed out": a write not committed within etcd's request
	//     timeout (ReqTimeout, 5 s + 2 election timeouts). Two causes
	//     here, neither a hamaster fault: a proposal a follower forwarded
	//     to a leader that is handing leadership over (raft's stepLeader
	//     drops proposals while a transfer is in progress, and the
	//     follower is not told: it waits out ReqTimeout; seen here on a
	//     quiet machine, one write in 4,309), and a commit starved on 2
	//     cores shared by three etcd members, three kube-apiservers and
	//     the load (seen in CI). Logged, never bounded: how often the
	//     second happens says how fast the machine is. The upgrade
	//     recreates one replica at a time, each gated on its health
	//     before the next (the order asserted below and in the upgrade
	//     tests), so quorum is never at stake.
	// Anything else (a refused or reset connection, an LB with no
	// backend, an apiserver shutting down) fails the test.
	var leaderChanged, timedOut []string
	for _, f := range ld.Failures() {
		switch {
		case strings.Contains(f, "etcdserver: leader changed"):
			leaderChanged = append(leaderChanged, f)
		case strings.Contains(f, "etcdserver: request timed out"):
			timedOut = append(timedOut, f)
		default:
			t.Errorf("failed request during the upgrade: %s", f)
		}
	}
	total := ld.OK.Load() + ld.Failed.Load()
	if len(leaderChanged) > 0 {
		t.Logf("%d of %d requests failed with etcd's \"leader changed\" while leadership moved: %v", len(leaderChanged), total, leaderChanged)
	}
	if len(timedOut) > 0 {
		t.Logf("%d of %d requests failed with etcd's \"request timed out\" (a commit starved on this machine, not a hamaster fault): %v", len(timedOut), total, timedOut)
	}
	if len(leaderChanged) > 3 {
		t.Errorf("%d requests failed with etcd's \"leader changed\": more than the leadership moves of one upgrade explain", len(leaderChanged))
	}
	if ld.OK.Load() == 0 {
		t.Error("the load made no successful request: it proves nothing")
	}
	e.assertVersions(ctx, realNewVersion, 3)
	for name, v := range e.replicaVersions(ctx, k) {
		if v != realNewVersion {
			t.Errorf("%s: /version %s, want %s", name, v, realNewVersion)
		}
	}
	order := upgradedOrder(rec.events)
	if len(order) != 3 || order[2] != leader {
		t.Errorf("upgrade order %v; want 3 replicas with the leader %s last", order, leader)
	}
	e.waitEndpoints(ctx, k, "after the upgrade")
}

func TestRealAPIServerBadFlagRollsBack(t *testing.T) {
	t.Parallel()
	e, ctx := startRealEnv(t, "rbad", 6*time.Minute)
	e.grow(ctx, 2)
	k := newKubeAPI(t, e)
	start := time.Now()
	err := e.upgrade(ctx, workflows.UpgradeParams{Version: realNewVersion, ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true, HealthTimeout: 2 * time.Minute, DrainGrace: 300 * time.Millisecond}, nil, nil)
	took := time.Since(start)
	if !errors.Is(err, workflows.ErrConcluded) {
		t.Fatalf("err = %v; want a concluded rollback", err)
	}
	if !strings.Contains(err.Error(), "unknown flag: --no-such-flag") {
		t.Errorf("the error does not quote kube-apiserver's refusal: %v", err)
	}
	// Fast: the refusal is diagnosed (the error quotes it, above), not
	// waited out: the health gate's timeout (HealthTimeout 2m) would read
	// "check failed: ...". How fast is a speed figure: logged here, and
	// measured (on the apiserver stand-in) by make bench's
	// BenchmarkBadFlagRollback.
	if strings.Contains(err.Error(), "check failed") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the rollback followed a health timeout, not the diagnosed refusal: %v", err)
	}
	t.Logf("refused flag rolled back in %v (a speed figure: BenchmarkBadFlagRollback): %v", took.Round(100*time.Millisecond), err)
	e.assertVersions(ctx, realOldVersion, 3)
	for name, v := range e.replicaVersions(ctx, k) {
		if v != realOldVersion {
			t.Errorf("%s: /version %s after the rollback, want %s", name, v, realOldVersion)
		}
	}
}

// TestRealAPIServerKillMidUpgrade kills (SIGKILL) the new kube-apiserver
// of the first upgraded replica right after its recreate step: while it
// starts (it never served: the node reports it refused and the upgrade
// rolls back) and once it serves (the node restarts it: the upgrade goes
// on, or rolls back if the restart misses the health gate). Either way
// every replica ends healthy at one version and nothing written before is
// lost.
func TestRealAPIServerKillMidUpgrade(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		whenReady func(nodeapi.Status) bool
	}{
		{"while it starts", func(st nodeapi.Status) bool { return st.APIServerPID != 0 }},
		{"once it serves", func(st nodeapi.Status) bool {
			return st.APIServerPID != 0 && st.APIServer == nodeapi.APIServerServing
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, ctx := startRealEnv(t, fmt.Sprintf("rkill%d", i), 8*time.Minute)
			e.grow(ctx, 2)
			k := newKubeAPI(t, e)
			for i := range 20 {
				if err := k.createConfigMap(ctx, fmt.Sprintf("before-%d", i), fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			killed := ""
			after := func(step string) error {
				if killed != "" || !strings.HasSuffix(step, "/recreate") {
					return nil
				}
				rs, err := e.c.Provider.Instances().List(ctx)
				if err != nil {
					return err
				}
				for _, r := range rs {
					if r.Template.Version != realNewVersion {
						continue
					}
					statusPath := filepath.Join(e.c.Settings.StateDir, e.name, "replicas", r.Name, "status.json")
					deadline := time.Now().Add(time.Minute)
					tick := time.NewTicker(20 * time.Millisecond) // polling a file another process writes
					defer tick.Stop()
					for time.Now().Before(deadline) {
						st, err := nodeapi.ReadStatus(statusPath)
						if err == nil && tc.whenReady(st) {
							if err := syscall.Kill(st.APIServerPID, syscall.SIGKILL); err != nil {
								return fmt.Errorf("kill kube-apiserver %d of %s: %w", st.APIServerPID, r.Name, err)
							}
							killed = r.Name
							t.Logf("killed kube-apiserver (pid %d, %s) of %s after %s", st.APIServerPID, st.APIServer, r.Name, step)
							return nil
						}
						<-tick.C
					}
					return fmt.Errorf("%s: no kube-apiserver to kill within a minute", r.Name)
				}
				return nil
			}
			err := e.upgrade(ctx, workflows.UpgradeParams{Version: realNewVersion, DrainGrace: 500 * time.Millisecond, HealthTimeout: 2 * time.Minute}, nil, after)
			if killed == "" {
				t.Fatal("no kube-apiserver was killed: the test proves nothing")
			}
			want := realNewVersion
			switch {
			case err == nil:
				t.Logf("the upgrade went on past the kill of %s's apiserver", killed)
			case errors.Is(err, workflows.ErrConcluded):
				t.Logf("the upgrade rolled back after the kill of %s's apiserver: %v", killed, err)
				want = realOldVersion
			default:
				t.Fatalf("rolling-upgrade after the kill: %v; want it finished or rolled back", err)
			}
			e.assertVersions(ctx, want, 3)
			for i := range 20 {
				if v, err := k.configMap(ctx, fmt.Sprintf("before-%d", i)); err != nil || v != fmt.Sprint(i) {
					t.Errorf("ConfigMap before-%d after the kill: %q, %v", i, v, err)
				}
			}
			e.waitEndpoints(ctx, k, "after the kill")
		})
	}
}
