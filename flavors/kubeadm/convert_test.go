package kubeadm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMissingSANs(t *testing.T) {
	t.Parallel()
	sans := []string{"kubernetes", "cp1", "10.96.0.1", "198.18.1.1", "API.example.com"}
	tests := []struct {
		name  string
		hosts []string
		want  []string
	}{
		{"all named", []string{"198.18.1.1", "cp1"}, nil},
		{"an IP in another spelling", []string{"::ffff:198.18.1.1"}, nil},
		{"DNS names are case-insensitive", []string{"api.example.com"}, nil},
		{"missing", []string{"198.18.1.100", "cp1", "vip.example.com"}, []string{"198.18.1.100", "vip.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := MissingSANs(sans, tt.hosts...); !slices.Equal(got, tt.want) {
				t.Errorf("MissingSANs(%v) = %v, want %v", tt.hosts, got, tt.want)
			}
		})
	}
}

// TestReissueConfig: the reissue runs with the cluster's own
// ClusterConfiguration (no controlPlaneEndpoint invented when it has
// none), certSANs gaining the extra names once, and the master's own
// advertise address and node name.
func TestReissueConfig(t *testing.T) {
	t.Parallel()
	const cc = "apiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.33.13\nnetworking:\n  dnsDomain: cluster.local\n  serviceSubnet: 10.96.0.0/12\n"
	tests := []struct {
		name, cc string
		extra    []string
		want     []string
		notWant  []string
	}{
		{"single master", cc, []string{"198.18.1.100"}, []string{"kind: InitConfiguration", "advertiseAddress: 198.18.1.1", "name: cp1", "- 198.18.1.100", "serviceSubnet: 10.96.0.0/12", "kind: ClusterConfiguration", "certificatesDir: /stage"}, []string{"controlPlaneEndpoint"}},
		{"names kept once", strings.Replace(cc, "apiServer: {}", "apiServer:\n  certSANs:\n  - old.example.com", 1), []string{"old.example.com", "198.18.1.100"}, []string{"- old.example.com", "- 198.18.1.100"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := ReissueConfig([]byte(tt.cc), "cp1", "198.18.1.1", "/stage", tt.extra)
			if err != nil {
				t.Fatal(err)
			}
			s := string(out)
			for _, w := range tt.want {
				if strings.Count(s, w) != 1 {
					t.Errorf("want %q once in\n%s", w, s)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(s, w) {
					t.Errorf("%q in\n%s", w, s)
				}
			}
		})
	}
	if _, err := ReissueConfig([]byte("kind: InitConfiguration\n"), "cp1", "198.18.1.1", "/stage", nil); err == nil {
		t.Error("a document that is no ClusterConfiguration was accepted")
	}
	if _, err := ReissueConfig([]byte(cc), "cp1", "cp1", "/stage", nil); err == nil {
		t.Error("an advertise address that is no IP was accepted")
	}
	// The installed pki is never where the phase writes: certificatesDir
	// is replaced.
	out, err := ReissueConfig([]byte(strings.Replace(cc, "apiServer: {}", "apiServer: {}\ncertificatesDir: /etc/kubernetes/pki", 1)), "cp1", "198.18.1.1", "/stage", nil)
	if err != nil || strings.Contains(string(out), "/etc/kubernetes/pki") || !strings.Contains(string(out), "certificatesDir: /stage") {
		t.Errorf("certificatesDir not replaced (%v):\n%s", err, out)
	}
}

// TestConversionLeft: what a resumed conversion still has to do on one
// master, from what it reads there.
func TestConversionLeft(t *testing.T) {
	t.Parallel()
	const (
		local = "https://198.18.1.1:6443"
		ep    = "198.18.1.100:8443"
		epURL = "https://" + ep
	)
	fresh := MasterState{Local: local, SANs: []string{"cp1", "kubernetes", "10.96.0.1", "198.18.1.1"},
		Servers: map[string]string{"admin.conf": local, "super-admin.conf": local, "kubelet.conf": local}}
	withSAN := fresh
	withSAN.SANs = append(slices.Clone(fresh.SANs), "198.18.1.100")
	pointed := withSAN
	pointed.Servers = map[string]string{"admin.conf": epURL, "super-admin.conf": epURL, "kubelet.conf": local}
	joined := pointed // a master that joined on the old endpoint: no super-admin.conf, kubelet.conf on it
	joined.Servers = map[string]string{"admin.conf": "https://old.example.com:6443", "kubelet.conf": "https://old.example.com:6443"}
	loopback := pointed
	loopback.Servers = map[string]string{"admin.conf": epURL, "kubelet.conf": "https://127.0.0.1:6443"}
	tests := []struct {
		name     string
		s        MasterState
		endpoint string
		want     Left
	}{
		{"nothing done", fresh, ep, Left{SANs: []string{"198.18.1.100"}, Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
		{"certificate reissued", withSAN, ep, Left{Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
		{"all done", pointed, ep, Left{}},
		{"kubelet.conf on the old endpoint moves", joined, ep, Left{Kubeconfigs: []string{"admin.conf", "kubelet.conf"}}},
		{"kubelet.conf on the loopback stays", loopback, ep, Left{}},
		{"an endpoint without a port is the bind port", pointed, "198.18.1.100", Left{Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
		{"a DNS name", pointed, "api.example.com:8443", Left{SANs: []string{"api.example.com"}, Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ConversionLeft(tt.s, tt.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.SANs, tt.want.SANs) || !slices.Equal(got.Kubeconfigs, tt.want.Kubeconfigs) || got.Done() != tt.want.Done() {
				t.Errorf("ConversionLeft = %+v (done %v), want %+v", got, got.Done(), tt.want)
			}
		})
	}
	if _, err := ConversionLeft(fresh, "host:port"); err == nil {
		t.Error("an endpoint with a bad port was accepted")
	}
}

func TestKubeconfigMoves(t *testing.T) {
	t.Parallel()
	const local, ep = "https://198.18.1.1:6443", "https://198.18.1.100:8443"
	tests := []struct {
		name, file, server string
		want               bool
	}{
		{"admin.conf on the master's address", "admin.conf", local, true},
		{"admin.conf there already", "admin.conf", ep, false},
		{"super-admin.conf", "super-admin.conf", local, true},
		{"kubelet.conf on the local apiserver", "kubelet.conf", local, false},
		{"kubelet.conf on localhost", "kubelet.conf", "https://localhost:6443", false},
		{"kubelet.conf on the old endpoint", "kubelet.conf", "https://198.18.1.50:6443", true},
		{"controller-manager.conf is never moved", "controller-manager.conf", local, false},
		{"scheduler.conf is never moved", "scheduler.conf", "https://198.18.1.50:6443", false},
	}
	for _, tt := range tests {
		if got := KubeconfigMoves(tt.file, tt.server, local, ep); got != tt.want {
			t.Errorf("%s: KubeconfigMoves(%s, %s) = %v, want %v", tt.name, tt.file, tt.server, got, tt.want)
		}
	}
}

func TestManifestFlag(t *testing.T) {
	t.Parallel()
	const m = "spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --advertise-address=198.18.1.1\n    - \"--secure-port=6443\"\n    image: registry.k8s.io/kube-apiserver:v1.33.13\n"
	for flag, want := range map[string]string{"advertise-address": "198.18.1.1", "secure-port": "6443", "bind-address": "", "advertise": ""} {
		if got := ManifestFlag([]byte(m), flag); got != want {
			t.Errorf("ManifestFlag(%s) = %q, want %q", flag, got, want)
		}
	}
}

// TestCheckReissued: a reissued certificate is installed only when the
// masters' CA signed it and it names every old name and every new one.
func TestCheckReissued(t *testing.T) {
	t.Parallel()
	ca, caKey := newCert(t, nil, nil, nil)
	other, otherKey := newCert(t, nil, nil, nil)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	old := []string{"cp1", "kubernetes", "10.96.0.1", "198.18.1.1"}
	tests := []struct {
		name    string
		sans    []string
		signer  *x509.Certificate
		key     *ecdsa.PrivateKey
		wantErr string
	}{
		{"old and new names", append(slices.Clone(old), "198.18.1.100"), ca, caKey, ""},
		{"a name dropped", []string{"cp1", "kubernetes", "198.18.1.1", "198.18.1.100"}, ca, caKey, "lacks [10.96.0.1]"},
		{"the new name missing", old, ca, caKey, "lacks [198.18.1.100]"},
		{"another CA", append(slices.Clone(old), "198.18.1.100"), other, otherKey, "not signed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newCert(t, tt.sans, tt.signer, tt.key)
			err := CheckReissued(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), caPEM, old, []string{"198.18.1.100"})
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("CheckReissued = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// newCert makes a certificate naming sans signed by parent (a CA of its
// own when parent is nil).
func newCert(t *testing.T, sans []string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
		tmpl.Subject.CommonName = "kubernetes"
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func TestIsConflict(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		`Error from server (Conflict): error when replacing "/var/lib/hamaster/kube-system-kubeadm-config.json": Operation cannot be fulfilled on configmaps "kubeadm-config": the object has been modified; please apply your changes to the latest version and try again`: true,
		`Error from server (Forbidden): configmaps "kubeadm-config" is forbidden`:                            false,
		`The connection to the server 198.18.1.1:6443 was refused - did you specify the right host or port?`: false,
	} {
		if got := IsConflict([]byte(s)); got != want {
			t.Errorf("IsConflict(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestReissueSANs(t *testing.T) {
	t.Parallel()
	old := []string{"cp1", "kubernetes", "kubernetes.default", "10.96.0.1", "198.18.1.1", "old-lb.example.com"}
	got := ReissueSANs(old, []string{"198.18.1.100", "old-lb.example.com", "::ffff:198.18.1.1"}, "cp1", "198.18.1.1")
	if want := []string{"10.96.0.1", "old-lb.example.com", "198.18.1.100"}; !slices.Equal(got, want) {
		t.Errorf("ReissueSANs = %v, want %v", got, want)
	}
}
