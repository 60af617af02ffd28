//go:build fidelity

// The gcefake binary as an operator runs it, with the hamaster binary
// against it: it builds three binaries and boots a kube-up master, so
// .ci/run runs it (-tags fidelity) rather than make test.

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
	"github.com/hamaster/hamaster/testbed/vpc/vpctest"
)

// TestGCEFakeProcess runs bin/gcefake as an operator would: it waits for
// hamaster.env, checks the master it points at (readyz on the address the
// REST API reports, SSH with the written known_hosts), then stops it with
// SIGTERM and checks nothing is left.
func TestGCEFakeProcess(t *testing.T) {
	vpctest.Need(t)
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("needs /usr/sbin/sshd (.ci/run installs openssh-server)")
		}
		t.Skip("needs /usr/sbin/sshd (apt-get install openssh-server)")
	}
	start := time.Now()
	bin := labcmdtest.Build(t, "cmd/gcefake", "cmd/hamaster-node", "cmd/hamaster")
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	state := filepath.Join(t.TempDir(), "state")
	before := labcmdtest.Netns(t)
	// 198.18.240-249: away from vpctest's 100-239.
	ext := fmt.Sprintf("198.18.%d.0/24", 240+rand.IntN(10))
	g := startGCEFake(t, bin, state, "--kube-up-master", "kubernetes-master",
		"--project", "p-test", "--zone", "us-central1-c", "--external-range", ext, "--op-latency", "20ms", "--log-level", "warn")
	launched := time.Now()
	env := g.awaitEnv(context.Background(), t, state, 3*time.Minute)
	t.Logf("hamaster.env after %v", time.Since(launched).Round(time.Millisecond))
	for k, want := range map[string]string{"HAMASTER_PROVIDER": "gce", "HAMASTER_GCE_PROJECT": "p-test", "HAMASTER_GCE_ZONE": "us-central1-c",
		"HAMASTER_GCE_MASTER_NAME": "kubernetes-master", "HAMASTER_SSH_PORT": "22", "HAMASTER_SSH_USER": "hamaster"} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}

	// The static IP as the REST API reports it on the instance.
	resp, err := http.Get(env["HAMASTER_GCE_ENDPOINT"] + "/compute/v1/projects/p-test/zones/us-central1-c/instances/kubernetes-master")
	if err != nil {
		t.Fatal(err)
	}
	var inst struct {
		NetworkInterfaces []struct {
			NetworkIP     string
			AccessConfigs []struct{ NatIP string }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&inst)
	resp.Body.Close()
	if err != nil || len(inst.NetworkInterfaces) == 0 || len(inst.NetworkInterfaces[0].AccessConfigs) == 0 {
		t.Fatalf("instance: %v %+v", err, inst)
	}
	nat := inst.NetworkInterfaces[0].AccessConfigs[0].NatIP
	if nat != env["GCEFAKE_STATIC_IP"] {
		t.Errorf("natIP %s, hamaster.env's static IP %s", nat, env["GCEFAKE_STATIC_IP"])
	}
	caPEM, err := os.ReadFile(env["GCEFAKE_CA"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err = hc.Get("https://" + nat + ":443/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %s %s", resp.Status, body)
	}
	hc.CloseIdleConnections()

	// SSH to the external address, host key checked with the written
	// known_hosts, and a tunnel to etcd's client port on the master's
	// loopback.
	keyPEM, err := os.ReadFile(env["HAMASTER_SSH_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := knownhosts.New(env["HAMASTER_SSH_KNOWN_HOSTS"])
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ssh.Dial("tcp", net.JoinHostPort(nat, env["HAMASTER_SSH_PORT"]), &ssh.ClientConfig{User: env["HAMASTER_SSH_USER"],
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hk, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("ssh: %v", err)
	}
	conn, err := sc.Dial("tcp", "127.0.0.1:2379")
	if err != nil {
		t.Fatalf("tunnel to etcd: %v", err)
	}
	conn.Close()
	sc.Close()

	cliFlow(t, bin, env)

	// SIGTERM: every process, namespace and file goes.
	nsDuring := labcmdtest.Netns(t)
	made := 0
	for ns := range nsDuring {
		if !before[ns] && strings.HasPrefix(ns, "hm-f") {
			made++
		}
	}
	if made != 2 {
		t.Errorf("%d new hm-f* namespaces while running, want 2 (the router and master 0): %v", made, nsDuring)
	}
	stopStart := time.Now()
	g.stop(t)
	t.Logf("stopped in %v", time.Since(stopStart).Round(time.Millisecond))
	// gcefake's VPC is hm-f<hex>-*; other tests' run meanwhile.
	for ns := range labcmdtest.Netns(t) {
		if !before[ns] && nsDuring[ns] && strings.HasPrefix(ns, "hm-f") {
			t.Errorf("namespace %s left behind", ns)
		}
	}
	if ps := labcmdtest.ProcessesMentioning(state); len(ps) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(ps, "\n"))
	}
	left, _ := os.ReadDir(state)
	for _, e := range left {
		t.Errorf("file left in --state: %s", e.Name())
	}
	if r, _ := exec.Command("ip", "route", "show", ext).Output(); len(bytes.TrimSpace(r)) > 0 {
		t.Errorf("route to %s left: %s", ext, r)
	}
}

// cliFlow is the acceptance run, with the hamaster binary and
// nothing but hamaster.env: add-replica twice, remove-replica twice, and
// after each half what the REST API shows.
func cliFlow(t *testing.T, bin string, env map[string]string) {
	t.Helper()
	stateDir := t.TempDir()
	hm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "hamaster"), args...)
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		// The operator's journals and snapshots are theirs, not the
		// fake's: kept outside --state, which gcefake empties on exit.
		cmd.Env = append(cmd.Env, "HAMASTER_STATE_DIR="+stateDir)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hamaster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("hamaster %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		return string(out)
	}
	api := env["HAMASTER_GCE_ENDPOINT"] + "/compute/v1/projects/" + env["HAMASTER_GCE_PROJECT"]
	region := "regions/us-central1"
	get := func(path string) map[string]any {
		t.Helper()
		resp, err := http.Get(api + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return nil
		}
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return m
	}
	names := func(coll string) []string {
		t.Helper()
		var out []string
		items, _ := get(coll)["items"].([]any)
		for _, it := range items {
			out = append(out, it.(map[string]any)["name"].(string))
		}
		slices.Sort(out)
		return out
	}
	zone := "zones/" + env["HAMASTER_GCE_ZONE"]
	master := env["HAMASTER_GCE_MASTER_NAME"]
	replicas := []string{master + "-a1b", master + "-c2d"}
	for _, r := range replicas {
		hm("add-replica", "--name", r, "--yes")
	}
	// Replica kube-env as replicate-master-instance writes it.
	inst := get(zone + "/instances/" + replicas[0])
	kubeEnv := ""
	for _, it := range inst["metadata"].(map[string]any)["items"].([]any) {
		if it.(map[string]any)["key"] == "kube-env" {
			kubeEnv = it.(map[string]any)["value"].(string)
		}
	}
	for _, want := range []string{"INITIAL_ETCD_CLUSTER: '" + master + "," + replicas[0] + "'", "INITIAL_ETCD_CLUSTER_STATE: 'existing'"} {
		if !strings.Contains(kubeEnv, want) {
			t.Errorf("%s kube-env lacks %s", replicas[0], want)
		}
	}
	fr := get(region + "/forwardingRules/" + master)
	if fr == nil || fr["IPAddress"] != env["GCEFAKE_STATIC_IP"] || fmt.Sprint(fr["ports"]) != "[443]" {
		t.Errorf("forwarding rule %s: %v", master, fr)
	}
	fw := get("global/firewalls/" + master + "-lb-health-checks")
	if fw == nil || !strings.Contains(fmt.Sprint(fw["sourceRanges"]), "35.191.0.0/16") || !strings.Contains(fmt.Sprint(fw["sourceRanges"]), "130.211.0.0/22") ||
		fmt.Sprint(fw["allowed"]) != "[map[IPProtocol:tcp ports:[443]]]" {
		t.Errorf("health-check firewall rule: %v", fw)
	}
	if out := hm("status"); !strings.Contains(out, replicas[1]) {
		t.Errorf("status does not show %s:\n%s", replicas[1], out)
	}
	for i := len(replicas) - 1; i >= 0; i-- {
		hm("remove-replica", "--name", replicas[i], "--yes")
	}
	// Back to kube-up's master alone, holding its static IP.
	inst = get(zone + "/instances/" + master)
	if nat := inst["networkInterfaces"].([]any)[0].(map[string]any)["accessConfigs"].([]any)[0].(map[string]any)["natIP"]; nat != env["GCEFAKE_STATIC_IP"] {
		t.Errorf("static IP not back on %s: natIP %v", master, nat)
	}
	for coll, want := range map[string][]string{
		zone + "/instances": {master}, zone + "/disks": {master, master + "-pd"}, region + "/addresses": {master + "-ip"},
		region + "/forwardingRules": nil, region + "/backendServices": nil, region + "/healthChecks": nil, zone + "/instanceGroups": nil,
		"global/firewalls": {master + "-etcd", master + "-https"},
	} {
		if got := names(coll); !slices.Equal(got, want) {
			t.Errorf("%s after the removals: %v, want %v", coll, got, want)
		}
	}
}
