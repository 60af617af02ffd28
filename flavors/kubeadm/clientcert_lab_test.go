//go:build metallab

package kubeadm_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// IssueClient on a master built by the real kubeadm init (no
// controlPlaneEndpoint), reached as the inventory's labop through sudo:
// the certificate `kubeadm kubeconfig user` issued there authenticates to
// the apiserver (kubeadm:cluster-admins may list Nodes, a group of its
// own may not), the server is the master's own address, nothing under
// /etc/kubernetes changed; with ca.key moved away the refusal names the
// master and the external CA.
func TestIssueClientOnKubeadmMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	lab, p, run := kubeadmHosts(ctx, t, metallabtest.KubeadmOptions(t, 1, labVersion))
	h1 := lab.Hosts[0]
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion}); err != nil {
		t.Fatal(err)
	}
	f, err := kubeadm.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(p, f)
	const sums = "find /etc/kubernetes -type f | sort | xargs md5sum"
	before := run(h1.Name, sums)

	get := func(c flavors.ClientCredentials, path string) (int, string) {
		t.Helper()
		pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CACertPEM) {
			t.Fatal("no CA in the credentials")
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		resp, err := hc.Get(c.Server + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	start := time.Now()
	admin, err := f.IssueClient(ctx, flavors.ClientRequest{User: "lab-admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("IssueClient took %s (on %s, groups %v, server %s)", time.Since(start).Round(time.Millisecond), admin.Master, admin.Groups, admin.Server)
	if want := fmt.Sprintf("https://%s:6443", h1.Addr); admin.Server != want || admin.Master != h1.Name || !slices.Equal(admin.Groups, []string{kubeadm.ClusterAdminsGroup}) {
		t.Errorf("credentials: server %s, master %s, groups %v; want %s, %s, [%s]", admin.Server, admin.Master, admin.Groups, want, h1.Name, kubeadm.ClusterAdminsGroup)
	}
	if code, body := get(admin, "/api/v1/nodes"); code != http.StatusOK || !strings.Contains(body, `"name":"host-1"`) {
		t.Errorf("GET /api/v1/nodes as lab-admin: %d %.300s", code, body)
	}
	dev, err := f.IssueClient(ctx, flavors.ClientRequest{User: "alice", Groups: []string{"dev"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(dev, "/api/v1/nodes"); code != http.StatusForbidden || !strings.Contains(body, `User \"alice\" cannot list resource \"nodes\"`) {
		t.Errorf("GET /api/v1/nodes as alice in dev: %d %.300s; want 403 for alice", code, body)
	}
	if after := run(h1.Name, sums); after != before {
		t.Errorf("/etc/kubernetes changed:\n%s\nthen\n%s", before, after)
	}

	run(h1.Name, "mv /etc/kubernetes/pki/ca.key /etc/kubernetes/pki/ca.key.aside")
	_, err = f.IssueClient(ctx, flavors.ClientRequest{User: "lab-admin"})
	run(h1.Name, "mv /etc/kubernetes/pki/ca.key.aside /etc/kubernetes/pki/ca.key")
	if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "master host-1: kubeadm kubeconfig user: the cluster CA's key (/etc/kubernetes/pki/ca.key) is not readable there") {
		t.Errorf("without ca.key: %v", err)
	}
}
