// Package awstest runs the AWS provider against moto for tests: it starts
// moto_server on a free loopback port, puts a recording, fault-injecting
// reverse proxy in front of it (Proxy) that adds what moto lacks (the
// NLB's states and timing, eventual consistency, Route53's PENDING), and
// plays EC2's and ELBv2's data plane in a network-namespace VPC
// (VPCPlane): every running instance is a namespace with its own sshd, a
// kube-up master boots from its user data, the Elastic IPs and the NLB
// are reachable from the test's (the operator's) namespace and the
// private addresses are not. UpKubeUp makes a kube-up cluster's master 0
// through EC2 as kube-up's start-master does (kubeupmaster) and a
// bastion. Nothing leaves the machine: moto listens on loopback and every
// other address lives in the namespaces.
package awstest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/loopbacktest"
)

// Moto is a running moto_server.
type Moto struct {
	URL string // the one-at-a-time front (serialize), never moto_server itself
}

// serialize is the front every client of the test's moto_server goes
// through: one request at a time. moto_server serves each request on a
// thread of its own (moto/server.py: run_simple(..., threaded=True)), but
// moto 5.2.1's response serializer is not safe across threads: a
// RunInstances whose instance moto had already made (its private IP
// claimed) failed to serialize with "RuntimeError: dictionary changed
// size during iteration" (moto/core/serialize.py, AttributePicker's
// response_transformers) while another request serialized, and so
// answered 500; every retry then failed with moto's "IP already in use"
// (subnets.py request_ip: a bare Exception, another 500), and the test
// bed's start-master failed after the SDK's 10 attempts. EC2 answers
// concurrent calls; one at a time is what makes moto answer them right.
func serialize(t testing.TB, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// StartMoto starts moto_server on a free loopback port and stops it when
// the test ends. Without moto_server on $PATH the test fails in CI
// (CI=true: .ci/run requires it) and is skipped elsewhere, with the
// install command either way.
func StartMoto(t testing.TB) *Moto {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		const hint = "moto_server not found on $PATH (install with: python3 -m pip install 'moto[server]==5.2.1')"
		if os.Getenv("CI") == "true" {
			t.Fatal(hint + ": CI must run the AWS provider tests")
		}
		t.Skip(hint + ": AWS provider tests skipped")
	}
	port := loopbacktest.Port(t)
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logf, err := os.CreateTemp("", "moto-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start moto_server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logf.Close()
		if !t.Failed() {
			os.Remove(logf.Name())
		} else {
			t.Logf("moto_server log: %s", logf.Name())
		}
	})
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, direct+"/moto-api/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return &Moto{URL: serialize(t, direct)}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("moto_server exited at start:\n%s", b)
		case <-ctx.Done():
			t.Fatal("moto_server did not answer within 60s")
		case <-tick.C:
		}
	}
}
