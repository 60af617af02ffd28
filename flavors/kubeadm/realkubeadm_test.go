//go:build realapiserver

// The real-apiserver tier ('make test-real'): the real kubeadm of each
// pinned version, from HAMASTER_REAL_APISERVER_DIR/<version>/kubeadm.

package kubeadm

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/testbed/realtier"
)

// The conversion to HA reissues each master's apiserver certificate by
// running `kubeadm init phase certs apiserver` with the configuration
// SetControlPlaneEndpoint wrote: the real kubeadm of every pinned version
// must put the new endpoint and the kept SANs in it, besides what it put
// there at init (the advertise address, the node name, the service IP),
// while it keeps an existing certificate that lacks them as it is (which
// is why the flavor has it write into a staging directory).
func TestRealAPIServerKubeadmReissuesForEndpoint(t *testing.T) {
	eachRealKubeadm(t, func(t *testing.T, bin string) {
		work := t.TempDir()
		pki := filepath.Join(work, "pki")
		kubeadm := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			return string(out), err
		}
		defaults, err := kubeadm("config", "print", "init-defaults")
		if err != nil {
			t.Fatalf("kubeadm config print init-defaults: %v\n%s", err, defaults)
		}
		initDoc, clusterDoc, ok := strings.Cut(defaults, "\n---\n")
		if !ok {
			t.Fatalf("init-defaults: no second document:\n%s", defaults)
		}
		initDoc = strings.NewReplacer("advertiseAddress: 1.2.3.4", "advertiseAddress: 10.0.0.1", "name: node", "name: master-0").Replace(initDoc)
		clusterDoc = strings.Replace(clusterDoc, "certificatesDir: /etc/kubernetes/pki", "certificatesDir: "+pki, 1)
		write := func(cluster string) string {
			p := filepath.Join(work, "kubeadm.yaml")
			if err := os.WriteFile(p, []byte(initDoc+"\n---\n"+cluster), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		cfg := write(clusterDoc)
		for _, phase := range []string{"ca", "apiserver"} {
			if out, err := kubeadm("init", "phase", "certs", phase, "--config", cfg); err != nil {
				t.Fatalf("kubeadm init phase certs %s: %v\n%s", phase, err, out)
			}
		}
		converted, changed, err := SetControlPlaneEndpoint([]byte(clusterDoc), "10.0.0.100:6443", []string{"old-lb.example.com"})
		if err != nil || !changed {
			t.Fatalf("SetControlPlaneEndpoint: %v %v", changed, err)
		}
		cfg = write(string(converted))
		// kubeadm keeps an existing certificate as it is, without the
		// new endpoint (kubeadm#1447: certs renew keeps the old SANs
		// too): so the flavor moves the old pair aside first.
		if out, err := kubeadm("init", "phase", "certs", "apiserver", "--config", cfg); err != nil || !strings.Contains(out, "Using existing apiserver certificate") {
			t.Fatalf("kubeadm with an apiserver certificate on disk: %v\n%s", err, out)
		}
		if c := apiserverCert(t, pki); slices.ContainsFunc(c.IPAddresses, func(x net.IP) bool { return x.Equal(net.ParseIP("10.0.0.100")) }) {
			t.Fatalf("kubeadm reissued the certificate in place (IPs %v): the flavor's move-aside step is not needed any more", c.IPAddresses)
		}
		for _, f := range []string{"apiserver.crt", "apiserver.key"} {
			if err := os.Rename(filepath.Join(pki, f), filepath.Join(pki, f+".old")); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := kubeadm("init", "phase", "certs", "apiserver", "--config", cfg); err != nil {
			t.Fatalf("kubeadm init phase certs apiserver (converted): %v\n%s", err, out)
		}
		c := apiserverCert(t, pki)
		for _, ip := range []string{"10.0.0.100", "10.0.0.1", "10.96.0.1"} {
			if !slices.ContainsFunc(c.IPAddresses, func(x net.IP) bool { return x.Equal(net.ParseIP(ip)) }) {
				t.Errorf("reissued certificate's IPs %v lack %s", c.IPAddresses, ip)
			}
		}
		for _, name := range []string{"old-lb.example.com", "master-0", "kubernetes.default.svc"} {
			if !slices.Contains(c.DNSNames, name) {
				t.Errorf("reissued certificate's names %v lack %s", c.DNSNames, name)
			}
		}

		// The flavor's way (AddServingSANs): ReissueConfig with a
		// staging certificatesDir holding only the CA, every old name
		// kept through ReissueSANs, CheckReissued on what kubeadm
		// wrote there.
		stage := filepath.Join(work, "stage")
		if err := os.MkdirAll(stage, 0o700); err != nil {
			t.Fatal(err)
		}
		var caPEM []byte
		for _, f := range []string{"ca.crt", "ca.key"} {
			b, err := os.ReadFile(filepath.Join(pki, f))
			if err != nil {
				t.Fatal(err)
			}
			if f == "ca.crt" {
				caPEM = b
			}
			if err := os.WriteFile(filepath.Join(stage, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		old := certSANs(c)
		hosts := []string{"api.example.com", "10.0.0.200"}
		doc, err := ReissueConfig(converted, "master-0", "10.0.0.1", stage, ReissueSANs(old, hosts, "master-0", "10.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(work, "reissue.yaml")
		if err := os.WriteFile(p, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := kubeadm("init", "phase", "certs", "apiserver", "--config", p); err != nil {
			t.Fatalf("kubeadm init phase certs apiserver (ReissueConfig):\n%s\n%v\n%s", doc, err, out)
		}
		staged, err := os.ReadFile(filepath.Join(stage, "apiserver.crt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckReissued(staged, caPEM, old, hosts); err != nil {
			t.Errorf("CheckReissued of kubeadm's certificate from ReissueConfig: %v", err)
		}
	})
}

func apiserverCert(t *testing.T, pki string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pki, "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := certs.ParseCertPEM(raw)
	if err != nil {
		t.Fatalf("apiserver.crt: %v", err)
	}
	return c
}

// hamaster kubeconfig on a kubeadm cluster runs UserCommand on a master:
// the real kubeadm of every pinned version must take the cluster's
// ClusterConfiguration on its stdin and the flags as quoted, and print a
// kubeconfig that ParseUserKubeconfig reads and CheckUserCertificate
// accepts (CN, O, validity, the CA), naming the controlPlaneEndpoint;
// without the CA key, it must fail with the words IssueClient turns
// into its external-CA hint.
func TestRealAPIServerKubeadmKubeconfigUser(t *testing.T) {
	eachRealKubeadm(t, func(t *testing.T, bin string) {
		work := t.TempDir()
		// "kubeadm" on the PATH, as on a master.
		binDir := filepath.Join(work, "bin")
		if err := os.Mkdir(binDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(bin, filepath.Join(binDir, "kubeadm")); err != nil {
			t.Fatal(err)
		}
		run := func(script string) (string, string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", script)
			cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			return stdout.String(), stderr.String(), err
		}
		defaults, _, err := run("kubeadm config print init-defaults")
		if err != nil {
			t.Fatalf("kubeadm config print init-defaults: %v", err)
		}
		_, clusterDoc, ok := strings.Cut(defaults, "\n---\n")
		if !ok {
			t.Fatalf("init-defaults: no second document:\n%s", defaults)
		}
		pki := filepath.Join(work, "pki")
		clusterDoc = strings.Replace(clusterDoc, "certificatesDir: /etc/kubernetes/pki", "certificatesDir: "+pki, 1)
		clusterDoc, _ = strings.CutSuffix(clusterDoc, "\n")
		clusterDoc += "\ncontrolPlaneEndpoint: 198.18.7.100:8443\n"
		if _, err := ParseClusterConfiguration([]byte(clusterDoc)); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(work, "cluster.yaml")
		if err := os.WriteFile(cfg, []byte(clusterDoc), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, stderr, err := run("kubeadm init phase certs ca --config " + cfg); err != nil {
			t.Fatalf("kubeadm init phase certs ca: %v\n%s%s", err, out, stderr)
		}
		groups := []string{"kubeadm:cluster-admins", "o'dev"}
		script, err := UserCommand([]byte(clusterDoc), "o'brien", groups, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, stderr, err := run(script)
		if err != nil {
			t.Fatalf("%s\n%v\n%s", script, err, stderr)
		}
		t.Logf("kubeadm kubeconfig user: %s; stderr %q", time.Since(start).Round(time.Millisecond), stderr)
		kc, err := ParseUserKubeconfig([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		if kc.Server != "https://198.18.7.100:8443" {
			t.Errorf("server %q; want the controlPlaneEndpoint", kc.Server)
		}
		if err := CheckUserCertificate(kc, "o'brien", groups, time.Now().Add(2*time.Hour+time.Minute)); err != nil {
			t.Error(err)
		}
		if c, _ := certs.ParseCertPEM(kc.CertPEM); c.NotAfter.Before(start.Add(2*time.Hour - time.Minute)) {
			t.Errorf("valid until %s; want 2h from %s", c.NotAfter, start)
		}
		if err := os.Remove(filepath.Join(pki, "ca.key")); err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := run(script); err == nil || !strings.Contains(stderr, "CA files couldn't be loaded") {
			t.Errorf("without ca.key: %v, stderr %q; want kubeadm's \"CA files couldn't be loaded\"", err, stderr)
		}
	})
}

// eachRealKubeadm runs test, in parallel, once for each pinned version's
// real kubeadm (bin is its path).
func eachRealKubeadm(t *testing.T, test func(t *testing.T, bin string)) {
	dir := realtier.BinDir(t)
	for _, version := range []string{"v1.33.13", "v1.34.4"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			test(t, filepath.Join(dir, version, "kubeadm"))
		})
	}
}
