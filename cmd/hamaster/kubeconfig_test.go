package main

import (
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/certs"
)

// kubeconfigDoc is what the tests read of a kubeconfig.
type kubeconfigDoc struct {
	Clusters []struct {
		Cluster struct {
			Server string `yaml:"server"`
			CA     string `yaml:"certificate-authority-data"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		User struct {
			Cert string `yaml:"client-certificate-data"`
			Key  string `yaml:"client-key-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

// clientCert is the kubeconfig doc's client certificate, verified
// against its CA for client authentication.
func clientCert(t *testing.T, doc []byte) (*x509.Certificate, string) {
	t.Helper()
	var kc kubeconfigDoc
	if err := yaml.Unmarshal(doc, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig: %v\n%s", err, doc)
	}
	caPEM, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	certPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
	cert, err := certs.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("certificate-authority-data holds no certificate")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate not valid under the kubeconfig's CA: %v", err)
	}
	return cert, kc.Clusters[0].Cluster.Server
}

// TestKubeconfigOnHamastersMasters: on hamaster's own masters (the local
// provider) kubeconfig is what it was (CN hamaster-admin, O
// system:masters, a year, the static IP's endpoint), and takes kubeadm's
// flag names (--client-name, --org) and a shorter --validity.
func TestKubeconfigOnHamastersMasters(t *testing.T) {
	t.Parallel()
	c := newCLIEnv(t, "kc")
	if code, out, errs := c.run(nil, "local", "up", "--subnet", strconv.Itoa(c.subnet), "--etcd-heartbeat-ms", "50", "--etcd-election-ms", "500"); code != 0 {
		t.Fatalf("local up: exit %d\n%s\n%s", code, out, errs)
	}
	st := c.status()
	start := time.Now()
	code, out, errs := c.run(nil, "kubeconfig")
	if code != 0 || errs != "" {
		t.Fatalf("kubeconfig: exit %d\n%s", code, errs)
	}
	cert, server := clientCert(t, []byte(out))
	if want := "https://" + st["static_ip"].(string) + ":6443"; server != want {
		t.Errorf("server %q; want %q", server, want)
	}
	if cert.Subject.CommonName != "hamaster-admin" || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject %v; want CN=hamaster-admin O=system:masters", cert.Subject)
	}
	if d := cert.NotAfter.Sub(start); d < 365*24*time.Hour-time.Minute || d > 365*24*time.Hour+time.Minute {
		t.Errorf("valid for %v; want a year", d)
	}

	file := filepath.Join(t.TempDir(), "alice.kubeconfig")
	code, out, errs = c.run(nil, "kubeconfig", "--client-name", "alice", "--org", "dev", "--org", "qa", "--validity", "1h", "--file", file)
	if code != 0 || out != "" || !strings.Contains(errs, "wrote "+file+" (user alice, groups dev,qa, server https://") {
		t.Fatalf("kubeconfig --file: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v; want 0600", file, fi.Mode())
	}
	cert, _ = clientCert(t, doc)
	if cert.Subject.CommonName != "alice" || !slices.Equal(slices.Sorted(slices.Values(cert.Subject.Organization)), []string{"dev", "qa"}) {
		t.Errorf("subject %v; want CN=alice O=dev,qa", cert.Subject)
	}
	if d := time.Until(cert.NotAfter); d > time.Hour || d < 58*time.Minute {
		t.Errorf("valid for %v more; want an hour", d)
	}
}
