package kubeadm

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCACertHash(t *testing.T) {
	t.Parallel()
	// testdata/README.md: kubeadm's documented openssl recipe.
	const want = "sha256:3326bccab63d4bcdcca2db3ffd17065a02abf02b3b2df4cbc32147c56695cbb0"
	got, err := CACertHash(fixture(t, "ca.crt"))
	if err != nil || got != want {
		t.Fatalf("CACertHash = %q, %v; want %q", got, err, want)
	}
	if _, err := CACertHash([]byte("not pem")); err == nil {
		t.Error("CACertHash of garbage: no error")
	}
}

func TestTokenAndCertificateKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 20 {
		tok, err := NewToken()
		if err != nil || !tokenRE.MatchString(tok) || seen[tok] {
			t.Fatalf("NewToken = %q, %v (seen before: %v)", tok, err, seen[tok])
		}
		seen[tok] = true
	}
	k, err := NewCertificateKey()
	if err != nil || len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Fatalf("NewCertificateKey = %q, %v", k, err)
	}
}

func TestJoin(t *testing.T) {
	t.Parallel()
	good := Join{
		Endpoint: "10.0.0.100:6443", Token: "abcdef.0123456789abcdef",
		CAHash:         "sha256:" + strings.Repeat("ab", 32),
		CertificateKey: strings.Repeat("0f", 32), NodeName: "master-1",
		AdvertiseAddress: "10.0.0.2", BindPort: 6443,
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := "kubeadm join 10.0.0.100:6443 --token abcdef.<redacted> --discovery-token-ca-cert-hash sha256:" + strings.Repeat("ab", 32) +
		" --control-plane --certificate-key <redacted> --node-name master-1 --apiserver-advertise-address 10.0.0.2 --apiserver-bind-port 6443"
	if got := good.Redacted(); got != want {
		t.Errorf("Redacted:\n got %s\nwant %s", got, want)
	}
	if a := good.Args(); !slices.Contains(a, "0123456789abcdef") && !slices.Contains(a, "abcdef.0123456789abcdef") {
		t.Errorf("Args carry no token: %v", a)
	}
	for _, tc := range []struct {
		name string
		edit func(*Join)
		want string
	}{
		{"endpoint without port", func(j *Join) { j.Endpoint = "10.0.0.100" }, "endpoint"},
		{"token upper case", func(j *Join) { j.Token = "ABCDEF.0123456789abcdef" }, "token"},
		{"hash not sha256", func(j *Join) { j.CAHash = "md5:00" }, "CA hash"},
		{"short certificate key", func(j *Join) { j.CertificateKey = "00" }, "certificate key"},
		{"no node name", func(j *Join) { j.NodeName = "" }, "node name"},
		{"advertise a name", func(j *Join) { j.AdvertiseAddress = "master-1" }, "advertise address"},
		{"port 0", func(j *Join) { j.BindPort = 0 }, "bind port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := good
			tc.edit(&j)
			if err := j.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestSetControlPlaneEndpoint(t *testing.T) {
	t.Parallel()
	doc := fixture(t, "cluster-configuration-v1.33.13.yaml")
	out, changed, err := SetControlPlaneEndpoint(doc, "10.0.0.100:6443", []string{"10.0.0.1", "10.0.0.1"})
	if err != nil || !changed {
		t.Fatalf("SetControlPlaneEndpoint = %v, %v", changed, err)
	}
	c, err := ParseClusterConfiguration(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.ControlPlaneEndpoint != "10.0.0.100:6443" || !slices.Equal(c.APIServer.CertSANs, []string{"10.0.0.1"}) {
		t.Errorf("after: endpoint %q certSANs %v", c.ControlPlaneEndpoint, c.APIServer.CertSANs)
	}
	// Everything else as kubeadm wrote it.
	before, _ := ParseClusterConfiguration(doc)
	if c.KubernetesVersion != before.KubernetesVersion || c.Networking != before.Networking || c.Etcd.Local == nil || c.Etcd.Local.DataDir != "/var/lib/etcd" {
		t.Errorf("other fields changed: %+v", c)
	}
	for _, keep := range []string{"encryptionAlgorithm: RSA-2048", "imageRepository: registry.k8s.io", "caCertificateValidityPeriod: 87600h0m0s"} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("lost %q:\n%s", keep, out)
		}
	}
	if strings.Contains(string(out), "apiServer: {") {
		t.Errorf("apiServer written in flow style:\n%s", out)
	}
	// Idempotent.
	again, changed, err := SetControlPlaneEndpoint(out, "10.0.0.100:6443", []string{"10.0.0.1"})
	if err != nil || changed || string(again) != string(out) {
		t.Errorf("second SetControlPlaneEndpoint changed=%v err=%v", changed, err)
	}
	// Moved again (a new VIP): the endpoint follows, the SANs grow.
	moved, changed, err := SetControlPlaneEndpoint(out, "lb.example.com:443", []string{"10.0.0.100"})
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if c, _ := ParseClusterConfiguration(moved); c.ControlPlaneEndpoint != "lb.example.com:443" || !slices.Equal(c.APIServer.CertSANs, []string{"10.0.0.1", "10.0.0.100"}) {
		t.Errorf("moved: %q %v", c.ControlPlaneEndpoint, c.APIServer.CertSANs)
	}
}

func TestParseClusterConfigurationRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"not kubeadm", "apiVersion: v1\nkind: ConfigMap\n", "want kubeadm.k8s.io"},
		{"external etcd", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\netcd:\n  external:\n    endpoints: [https://e:2379]\n", "etcd.external"},
		{"bad endpoint", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: 'a:b:c'\n", "controlPlaneEndpoint"},
		{"not yaml", "{", "kubeadm-config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseClusterConfiguration([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want %q", err, tc.want)
			}
		})
	}
	if _, _, err := SetControlPlaneEndpoint(fixture(t, "cluster-configuration-v1.33.13.yaml"), "", nil); err == nil {
		t.Error("empty endpoint: no error")
	}
}

func TestSplitEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Endpoint
		bad  bool
	}{
		{in: "10.0.0.1:6443", want: Endpoint{"10.0.0.1", 6443}},
		{in: "lb.example.com", want: Endpoint{Host: "lb.example.com"}},
		{in: "[fd00::1]:443", want: Endpoint{"fd00::1", 443}},
		{in: "h:0", bad: true},
		{in: ":6443", bad: true},
		{in: "", bad: true},
	} {
		got, err := SplitEndpoint(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("SplitEndpoint(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func TestSetKubeconfigServer(t *testing.T) {
	t.Parallel()
	doc := fixture(t, "admin.conf")
	if s, err := KubeconfigServer(doc); err != nil || s != "https://10.0.0.1:6443" {
		t.Fatalf("KubeconfigServer = %q, %v", s, err)
	}
	out, changed, err := SetKubeconfigServer(doc, "https://10.0.0.100:6443")
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if s, _ := KubeconfigServer(out); s != "https://10.0.0.100:6443" {
		t.Errorf("server after: %q", s)
	}
	// The credentials and CA are untouched: the same lines but the server's.
	diff := 0
	a, b := strings.Split(string(doc), "\n"), strings.Split(string(out), "\n")
	if len(a) != len(b) {
		t.Fatalf("line count %d → %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			diff++
		}
	}
	if diff != 1 {
		t.Errorf("%d lines changed; want 1 (the server)", diff)
	}
	if _, changed, _ := SetKubeconfigServer(out, "https://10.0.0.100:6443"); changed {
		t.Error("second SetKubeconfigServer changed")
	}
	for _, bad := range []string{"http://10.0.0.100:6443", "10.0.0.100:6443", "https://h/path"} {
		if _, _, err := SetKubeconfigServer(doc, bad); err == nil {
			t.Errorf("server %q: no error", bad)
		}
	}
	if _, _, err := SetKubeconfigServer([]byte("apiVersion: v1\nkind: Config\n"), "https://h:1"); err == nil {
		t.Error("no clusters: no error")
	}
}

func TestManifestVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ manifest, want string }{
		{"spec:\n  containers:\n  - command:\n    - kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.33.13\n", "v1.33.13"},
		{"    - image: \"myreg:5000/k8s/kube-apiserver:v1.34.4@sha256:abcd\"\n", "v1.34.4"},
		{"    image: 'registry.k8s.io/kube-apiserver:v1.34.4'\n", "v1.34.4"},
		{"    image: myreg:5000/kube-apiserver\n", ""},
		{"kind: Pod\n", ""},
	} {
		got, err := ManifestVersion([]byte(tc.manifest))
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("ManifestVersion(%q) = %q, %v; want %q", tc.manifest, got, err, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	base := errors.New(`run "kubeadm 'join' 'x:6443' '--token' 'abcdef.0123456789abcdef' '--certificate-key' 'k3y'": context deadline exceeded`)
	err := redact(base, "abcdef.0123456789abcdef", "k3y")
	if strings.Contains(err.Error(), "0123456789abcdef") || strings.Contains(err.Error(), "k3y") || !strings.Contains(err.Error(), "abcdef.<redacted>") {
		t.Errorf("redact: %v", err)
	}
	if !errors.Is(err, base) {
		t.Error("redact: the original error is not wrapped")
	}
}

// TestPromotionLost: kubeadm join's stderr when etcd applied the
// learner's promotion but kubeadm's call timed out (kubeadm#3317; the
// lines as the metal walk saw them under load), and the failures that
// are not that one.
func TestPromotionLost(t *testing.T) {
	t.Parallel()
	const retry = `{"level":"warn","ts":"2026-11-29T17:30:38.931670Z","logger":"etcd-client","caller":"v3@v3.5.21/retry_interceptor.go:63","msg":"retrying of unary invoker failed","target":"etcd-endpoints://0x3e79cee33860/198.18.79.1:2379","attempt":0,"error":"rpc error: code = FailedPrecondition desc = etcdserver: can only promote a learner member"}`
	for _, tc := range []struct {
		name, stderr string
		want         bool
	}{
		{"promoted, the call timed out", retry + "\nerror execution phase etcd-join: error creating local etcd static pod manifest file: etcdserver: can only promote a learner member\nTo see the stack trace of this error execute with --v=5 or higher\n", true},
		{"a learner that never caught up", "error execution phase etcd-join: error creating local etcd static pod manifest file: etcdserver: can only promote a learner member which is in sync with leader\n", false},
		{"the retries alone", retry + "\n", false},
		{"another phase", "error execution phase kubelet-start: timed out waiting for the condition\n", false},
		{"nothing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := promotionLost(tc.stderr); got != tc.want {
				t.Errorf("promotionLost = %v; want %v", got, tc.want)
			}
		})
	}
}
