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
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/loopbacktest"
)

// Moto is a running moto_server.
type Moto struct {
	URL string
}

// StartMoto starts moto_server on a free loopback port and stops it when
// the test ends, having made moto's first DescribeKeyPairs before any
// client calls it (see below). Without moto_server on $PATH the test
// fails in CI (CI=true: .ci/run requires it) and is skipped elsewhere,
// with the install command either way.
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
	m := &Moto{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.URL+"/moto-api/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			// moto 5.2.1's DescribeKeyPairs adds an entry to a dict every
			// EC2 response shares and iterates while it serializes, on a
			// thread of its own (EC2BaseResponse's
			// RESPONSE_KEY_PATH_TO_TRANSFORMER, _exclude_from_response): a
			// first one beside a RunInstances failed that response with
			// "dictionary changed size during iteration" (a 500) after
			// moto had made the instance, and each retry with "IP already
			// in use". Later calls only replace the entry.
			if err := motoQuery(ctx, m.URL, "ec2", url.Values{"Action": {"DescribeKeyPairs"}, "Version": {"2016-11-15"}}); err != nil {
				t.Fatalf("moto_server: the first DescribeKeyPairs: %v", err)
			}
			return m
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

// motoQuery makes one query-protocol call of service to moto at motoURL
// (moto routes by the credential scope's service and does not check
// signatures), for calls the test beds make without an SDK client.
func motoQuery(ctx context.Context, motoURL, service string, form url.Values) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, motoURL+"/", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=testing/20260101/"+Region+"/"+service+"/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", service, form.Get("Action"), resp.Status, b)
	}
	return nil
}
