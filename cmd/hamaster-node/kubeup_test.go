package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/testbed/vpc/vpctest"
)

// The test binary doubles as hamaster-node (mainEnv: main's run with the
// process's arguments) and as an etcdctl-like helper run inside a VM's
// namespace (etcdEnv), since nothing outside a VM reaches its 127.0.0.1.
const (
	mainEnv = "HAMASTER_NODE_TEST_MAIN"
	etcdEnv = "HAMASTER_NODE_TEST_ETCD"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(mainEnv) != "":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stderr)
		stop()
		os.Exit(code)
	case os.Getenv(etcdEnv) != "":
		if err := etcdHelper(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperMember is one etcd member as etcdHelper reports it.
type helperMember struct {
	Name    string   `json:"name"`
	Peers   []string `json:"peers"`
	Learner bool     `json:"learner"`
	Started bool     `json:"started"` // it has published its name and client URLs
}

// etcdHelper runs inside a master's namespace, as kube-up's
// add-replica-to-etcd runs curl there over SSH:
//
//	add DISK PEER_MAIN PEER_EVENTS   adds a voting member to both clusters
//	list DISK                        prints {"main":[...],"events":[...]}
//
// Main etcd is dialled at https://127.0.0.1:2379 with the apiserver's etcd
// client certificate (as add-replica-to-etcd's TLSARG), events at
// http://127.0.0.1:4002.
func etcdHelper(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: add DISK PEER_MAIN PEER_EVENTS | list DISK")
	}
	pki := filepath.Join(args[1], "srv", "kubernetes", "pki")
	caPEM, err := os.ReadFile(filepath.Join(pki, "etcd-apiserver-ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "etcd-apiserver-client.crt"), filepath.Join(pki, "etcd-apiserver-client.key"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	clients := map[string]*clientv3.Client{}
	for name, c := range map[string]clientv3.Config{
		"main":   {Endpoints: []string{"https://127.0.0.1:2379"}, TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}},
		"events": {Endpoints: []string{"http://127.0.0.1:4002"}},
	} {
		c.DialTimeout, c.Context, c.Logger = 5*time.Second, ctx, zap.NewNop()
		cli, err := clientv3.New(c)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer cli.Close()
		clients[name] = cli
	}
	switch args[0] {
	case "add":
		if len(args) != 4 {
			return fmt.Errorf("add DISK PEER_MAIN PEER_EVENTS")
		}
		for i, name := range []string{"main", "events"} {
			if _, err := clients[name].MemberAdd(ctx, []string{args[2+i]}); err != nil {
				return fmt.Errorf("%s: member add %s: %w", name, args[2+i], err)
			}
		}
		return nil
	case "list":
		out := map[string][]helperMember{}
		for name, cli := range clients {
			resp, err := cli.MemberList(ctx)
			if err != nil {
				return fmt.Errorf("%s: member list: %w", name, err)
			}
			for _, m := range resp.Members {
				out[name] = append(out[name], helperMember{Name: m.Name, Peers: m.PeerURLs, Learner: m.IsLearner, Started: m.Name != "" && len(m.ClientURLs) > 0})
			}
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	return fmt.Errorf("unknown helper command %q", args[0])
}

// kubeUpNode is a hamaster-node kube-up-master process in a VM.
type kubeUpNode struct {
	name, dir string
	cmd       *exec.Cmd
	exited    chan struct{}
	err       error
}

// startKubeUpNode writes the metadata items to files and starts
// hamaster-node kube-up-master inside vm's namespace, with master 0's
// devel upload (km's tarballs) downloadable at kube-env's URLs; the test's
// cleanup stops it (SIGTERM, then SIGKILL).
func startKubeUpNode(t *testing.T, v *vpctest.VPC, vm, kubeEnv, masterCerts string, km *kubeuptest.Master) *kubeUpNode {
	t.Helper()
	dir := t.TempDir()
	n := &kubeUpNode{name: vm, dir: dir, exited: make(chan struct{})}
	for f, s := range map[string]string{"kube-env": kubeEnv, "kube-master-certs": masterCerts} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"kube-up-master",
		"--kube-env", filepath.Join(dir, "kube-env"), "--kube-master-certs", filepath.Join(dir, "kube-master-certs"),
		"--hostname", vm, "--disk", filepath.Join(dir, "disk"), "--status-file", filepath.Join(dir, "status.json"),
		"--pid-file", filepath.Join(dir, "node.pid"), "--log-file", filepath.Join(dir, "node.log"),
		"--resolve-timeout", "20s", "--etcd-unsafe-no-fsync"}
	env, err := kubeenv.Parse(kubeEnv)
	if err != nil {
		t.Fatal(err)
	}
	for key, body := range map[string][]byte{kubeenv.ServerBinaryTarURL: km.ServerTar, kubeenv.KubeManifestsTarURL: km.ManifestsTar} {
		f := filepath.Join(dir, key+".tar.gz")
		if err := os.WriteFile(f, body, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--download", env[key]+"="+f)
	}
	cmd, err := v.Command(context.Background(), vm, os.Args[0], args...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	// If the test process dies, so does the node (`ip netns exec` execs
	// it, and the signal survives exec).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// etcd's own (zap) log goes to stderr.
	stderr, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = nil, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd = cmd
	go func() { n.err = cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop sends SIGTERM (`ip netns exec` execs the node, so the pid is the
// node's) and waits; SIGKILL after 30 s.
func (n *kubeUpNode) stop(t *testing.T) {
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	t.Logf("stopping %s", n.name)
	select {
	case <-n.exited:
		if n.err != nil {
			t.Errorf("%s exited with %v; log:\n%s", n.name, n.err, n.log())
		}
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
		t.Errorf("%s did not stop within 30s of SIGTERM; killed", n.name)
	}
}

func (n *kubeUpNode) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "node.log"))
	e, _ := os.ReadFile(filepath.Join(n.dir, "stderr.log"))
	return string(b) + string(e)
}

func (n *kubeUpNode) status() (nodeapi.Status, error) {
	return nodeapi.ReadStatus(filepath.Join(n.dir, "status.json"))
}

// poll runs cond every 100 ms until it holds; it fails the test after
// timeout, or at once when a node has exited.
func poll(t *testing.T, timeout time.Duration, what string, nodes []*kubeUpNode, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var reason string
	err := wait.Until(ctx, 100*time.Millisecond, what, func() (bool, error) {
		ok, r := cond()
		if reason = r; ok {
			return true, nil
		}
		for _, n := range nodes {
			select {
			case <-n.exited:
				t.Fatalf("waiting for %s: %s exited (%v); log:\n%s", what, n.name, n.err, n.log())
			default:
			}
		}
		return false, nil
	})
	if err != nil {
		for _, n := range nodes {
			t.Logf("%s log:\n%s", n.name, n.log())
		}
		t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, reason)
	}
}

// getReadyz asks https://addr:443/readyz, verifying the serving
// certificate against the cluster CA for serverName ("" = addr).
func getReadyz(pool *x509.CertPool, addr netip.Addr, serverName string) (int, string, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
	resp, err := c.Get("https://" + addr.String() + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// inVM runs the etcd helper inside vm's namespace.
func inVM(ctx context.Context, v *vpctest.VPC, vm string, args ...string) ([]byte, error) {
	cmd, err := v.Command(ctx, vm, os.Args[0], args...)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), etcdEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return out, err
	}
	return out, nil
}

// TestKubeUpMasterInVPC boots kube-up's master 0 from kube-up's metadata
// in a VM of a namespace VPC, then adds a replica as kube-up's
// replicate-master does: members added on master 0's etcd clusters first
// (add-replica-to-etcd, run inside master 0), then the replica booted from
// replicate-master-instance's metadata.
func TestKubeUpMasterInVPC(t *testing.T) {
	vpctest.Need(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Created first, so its cleanup runs after every node's stop.
	v := vpctest.New(ctx, t, "k")
	ext0, ext1 := v.External(10), v.External(11)
	const master0, replica = "kubernetes-master", "kubernetes-master-a1b"
	if _, err := v.AddVM(ctx, master0, netip.MustParseAddr("10.128.0.2")); err != nil {
		t.Fatal(err)
	}
	if err := v.SetExternal(ctx, ext0, master0); err != nil {
		t.Fatal(err)
	}
	// Only addresses inside the VPC are dialled from here.
	if routed, r := v.Routed(ext0); !routed {
		t.Fatalf("%v is not routed into the VPC: %s", ext0, r)
	}

	km, err := kubeuptest.NewMaster(kubeuptest.Options{Project: "hamaster-test", Zone: "us-central1-b", StaticIP: ext0.String()})
	if err != nil {
		t.Fatal(err)
	}
	pool := km.ClusterCA.Pool()
	n0 := startKubeUpNode(t, v, master0, km.KubeEnv, km.MasterCerts, km)
	nodes := []*kubeUpNode{n0}
	ready := func(addr netip.Addr, serverName string) func() (bool, string) {
		return func() (bool, string) {
			code, body, err := getReadyz(pool, addr, serverName)
			if err != nil {
				return false, err.Error()
			}
			return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
		}
	}
	poll(t, 60*time.Second, "master 0's /readyz on its external address", nodes, ready(ext0, ""))
	t.Logf("master 0 ready after %v", time.Since(start).Round(time.Millisecond))
	// The status file is rewritten on changes and every 500 ms.
	statusOK := func(n *kubeUpNode) func() (bool, string) {
		return func() (bool, string) {
			st, err := n.status()
			if err != nil {
				return false, err.Error()
			}
			ok := st.Etcd == nodeapi.EtcdRunning && st.EtcdEvents == nodeapi.EtcdRunning && st.Ready &&
				slices.Equal(st.Listeners, []string{":443"})
			return ok, fmt.Sprintf("%+v", st)
		}
	}
	poll(t, 10*time.Second, "master 0's status: both members running, ready, :443", nodes, statusOK(n0))

	// replicate-master: add-replica-to-etcd 2379 2380 and 4002 2381 on the
	// existing master, then the replica from replicate-master-instance's
	// metadata.
	if _, err := v.AddVM(ctx, replica, netip.MustParseAddr("10.128.0.3")); err != nil {
		t.Fatal(err)
	}
	md, err := km.Parsed()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := kubeenv.Replicate(md, []string{master0}, replica)
	if err != nil {
		t.Fatal(err)
	}
	disk0 := filepath.Join(n0.dir, "disk")
	if out, err := inVM(ctx, v, master0, "add", disk0, kubeenv.PeerURL(kubeenv.EtcdMain, replica), kubeenv.PeerURL(kubeenv.EtcdEvents, replica)); err != nil {
		t.Fatalf("add-replica-to-etcd: %v %s", err, out)
	}
	n1 := startKubeUpNode(t, v, replica, kubeenv.Render(rep.Env), kubeenv.Render(rep.Certs), km)
	nodes = append(nodes, n1)
	if err := v.SetExternal(ctx, ext1, replica); err != nil {
		t.Fatal(err)
	}
	// The replica serves MASTER_CERT, copied from master 0: it names the
	// static IP and kubernetes.*, not the replica's ephemeral address.
	poll(t, 90*time.Second, "the replica's /readyz on its external address", nodes, ready(ext1, "kubernetes"))
	poll(t, 30*time.Second, "master 0's /readyz again", nodes, ready(ext0, ""))
	t.Logf("replica ready after %v", time.Since(start).Round(time.Millisecond))

	want := []string{kubeenv.MemberName(master0), kubeenv.MemberName(replica)}
	poll(t, 30*time.Second, "both clusters to list both members, started", nodes, func() (bool, string) {
		out, err := inVM(ctx, v, master0, "list", disk0)
		if err != nil {
			return false, err.Error()
		}
		var got map[string][]helperMember
		if err := json.Unmarshal(out, &got); err != nil {
			return false, err.Error()
		}
		for _, c := range []string{"main", "events"} {
			var names []string
			for _, m := range got[c] {
				if !m.Started || m.Learner {
					return false, fmt.Sprintf("%s: %+v", c, got[c])
				}
				names = append(names, m.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, want) {
				return false, fmt.Sprintf("%s: %+v", c, got[c])
			}
		}
		return true, ""
	})
	poll(t, 10*time.Second, "the replica's status: both members running, ready, :443", nodes, statusOK(n1))

	// The apiserver stand-ins store in the shared main etcd: written
	// through master 0, read through the replica.
	// /kv needs a client certificate signed by CA_CERT (the apiserver's
	// --client-ca-file), as kubectl's admin certificate is.
	admin, err := km.ClusterCA.IssueClient("admin", []string{"system:masters"}, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	adminTLS, err := admin.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kubernetes", MinVersion: tls.VersionTLS12}}}
	if resp, err := anon.Get("https://" + ext0.String() + "/kv/hello"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /kv without a client certificate = %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kubernetes", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{adminTLS}}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "https://"+ext0.String()+"/kv/hello", strings.NewReader("world"))
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT through master 0: %s", resp.Status)
	}
	resp, err = cl.Get("https://" + ext1.String() + "/kv/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "world" {
		t.Fatalf("GET through the replica: %s %q", resp.Status, body)
	}
	cl.CloseIdleConnections()
	t.Logf("done after %v", time.Since(start).Round(time.Millisecond))
}
