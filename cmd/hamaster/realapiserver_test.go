//go:build realapiserver

// The real-apiserver tier: built only with -tags realapiserver ('make
// test-real', run by .ci/run after 'make test'), which sets
// HAMASTER_REAL_APISERVER_DIR to the binaries 'make kube-apiserver' built.

package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/testbed/realtier"
)

// TestRealAPIServerCLIKubeconfig (the real-apiserver tier, run by make test-real, where
// HAMASTER_REAL_APISERVER_DIR names the kube-apiserver binaries): 'local up
// --control-plane real', status naming the control plane, and a
// kubeconfig from 'hamaster kubeconfig' that the real apiserver accepts as
// cluster-admin through the static IP; a refused choice exits 2.
func TestRealAPIServerCLIKubeconfig(t *testing.T) {
	dir := realtier.BinDir(t)
	t.Parallel()
	c := newCLIEnv(t, "rcli")
	c.env = append(c.env, "HAMASTER_KUBE_APISERVER_DIR="+dir)
	subnet := strconv.Itoa(c.subnet)
	if code, out, errs := c.run(nil, "local", "up", "--subnet", subnet, "--control-plane", "real", "--version", "v1.30.2"); code != 2 || !strings.Contains(errs, "--control-plane real --version v1.30.2") {
		t.Fatalf("local up with a version that has no binary: exit %d, want 2 naming the flags\n%s\n%s", code, out, errs)
	}
	if code, out, errs := c.run(nil, "local", "up", "--subnet", subnet, "--control-plane", "real", "--version", "v1.33.13", "--etcd-heartbeat-ms", "50", "--etcd-election-ms", "500"); code != 0 || !strings.Contains(out, "control plane: real") {
		t.Fatalf("local up --control-plane real: exit %d\n%s\n%s", code, out, errs)
	}
	if st := c.status(); st["control_plane"] != "real" {
		t.Errorf("status control_plane = %v, want real", st["control_plane"])
	}
	// An existing cluster keeps its choice.
	if code, _, errs := c.run(nil, "local", "up", "--control-plane", "standin"); code != 2 || !strings.Contains(errs, "runs real") {
		t.Errorf("local up --control-plane standin on a real cluster: exit %d, want 2: %s", code, errs)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if code, out, errs := c.run(nil, "kubeconfig", "--file", kcPath); code != 0 {
		t.Fatalf("kubeconfig: exit %d\n%s\n%s", code, out, errs)
	}
	if st, err := os.Stat(kcPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file: %v %v, want mode 0600", st, err)
	}
	b, err := os.ReadFile(kcPath)
	if err != nil {
		t.Fatal(err)
	}
	var kc kubeconfigDoc
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig: %v\n%s", err, b)
	}
	dec := func(s string) []byte {
		out, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(dec(kc.Clusters[0].Cluster.CA))
	cert, err := tls.X509KeyPair(dec(kc.Users[0].User.Cert), dec(kc.Users[0].User.Key))
	if err != nil {
		t.Fatal(err)
	}
	server := kc.Clusters[0].Cluster.Server
	if want := "https://198.19." + subnet + ".1:6443"; server != want {
		t.Errorf("server %s, want the static IP %s (the benchmark range, local up's default for the real apiserver)", server, want)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	for _, path := range []string{"/api/v1/namespaces", "/apis/rbac.authorization.k8s.io/v1/clusterroles"} {
		resp, err := client.Get(server + path)
		if err != nil {
			t.Fatalf("GET %s with the kubeconfig's credentials: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Items) == 0 {
			t.Errorf("GET %s as hamaster-admin: %s %.300s", path, resp.Status, body)
		}
	}
	// Without a client certificate the apiserver answers only health.
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := anon.Get(server + "/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous GET /api/v1/namespaces: %s, want 401 or 403", resp.Status)
	}
}
