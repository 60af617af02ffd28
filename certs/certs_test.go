package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// newTestCA returns a fresh ECDSA CA; they are cheap, so each test gets its own.
func newTestCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, ECDSA, 0)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func verify(ca *CA, cert *x509.Certificate, usage x509.ExtKeyUsage, dnsName string) error {
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:     ca.Pool(),
		DNSName:   dnsName,
		KeyUsages: []x509.ExtKeyUsage{usage},
	})
	return err
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func wantErrContains(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestParseKeyType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    KeyType
		wantErr bool
	}{
		{"", ECDSA, false},
		{"ecdsa", ECDSA, false},
		{"ECDSA", ECDSA, false},
		{" rsa ", RSA, false},
		{"RSA", RSA, false},
		{"dsa", "", true},
		{"ed25519", "", true},
	}
	for _, tt := range tests {
		got, err := ParseKeyType(tt.in)
		if tt.wantErr {
			wantErrContains(t, err, tt.in, `"ecdsa"`, `"rsa"`)
			if !errors.Is(err, errkind.InvalidArgument) {
				t.Errorf("ParseKeyType(%q) error is not InvalidArgument: %v", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseKeyType(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNewCA(t *testing.T) {
	t.Parallel()
	before := time.Now()
	ca := newTestCA(t, "hamaster etcd CA")
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA=%v BasicConstraintsValid=%v, want both true", c.IsCA, c.BasicConstraintsValid)
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("MaxPathLen=%d MaxPathLenZero=%v, want 0 and true", c.MaxPathLen, c.MaxPathLenZero)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; c.KeyUsage&want != want {
		t.Errorf("KeyUsage %b lacks CertSign|CRLSign", c.KeyUsage)
	}
	if len(c.SubjectKeyId) == 0 {
		t.Error("CA has no SubjectKeyId")
	}
	if c.Subject.CommonName != "hamaster etcd CA" {
		t.Errorf("CN %q", c.Subject.CommonName)
	}
	if got := before.Sub(c.NotBefore); got < 4*time.Minute || got > 6*time.Minute {
		t.Errorf("NotBefore is %v before now, want about 5m", got)
	}
	if got := c.NotAfter.Sub(before); got < defaultCAValidity-time.Minute || got > defaultCAValidity+time.Minute {
		t.Errorf("validity %v, want about 10 years", got)
	}
	if _, ok := ca.Key.(*ecdsa.PrivateKey); !ok {
		t.Errorf("default key is %T, want ECDSA", ca.Key)
	}
	if c.SerialNumber.BitLen() < 64 {
		t.Errorf("serial %v has only %d bits", c.SerialNumber, c.SerialNumber.BitLen())
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool()}); err != nil {
		t.Errorf("CA does not verify against its own pool: %v", err)
	}
	if !bytes.Equal(mustDecodePEM(t, ca.CertPEM), c.Raw) {
		t.Error("CertPEM does not hold Cert")
	}

	short, err := NewCA("short", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := short.Cert.NotAfter.Sub(short.Cert.NotBefore); got != time.Hour+backdate {
		t.Errorf("validity of 1h CA is %v", got)
	}

	for _, tt := range []struct {
		name     string
		cn       string
		kt       KeyType
		validity time.Duration
		want     string
	}{
		{"empty CN", " ", ECDSA, 0, "common name is empty"},
		{"negative validity", "x", ECDSA, -time.Hour, "negative"},
		{"bad key type", "x", "dsa", 0, `unknown key type "dsa"`},
	} {
		_, err := NewCA(tt.cn, tt.kt, tt.validity)
		wantErrContains(t, err, tt.want)
		if !errors.Is(err, errkind.InvalidArgument) {
			t.Errorf("%s: error is not InvalidArgument: %v", tt.name, err)
		}
	}
}

func mustDecodePEM(t *testing.T, data []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM in %q", data)
	}
	return b.Bytes
}

func TestIssueKinds(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	other := newTestCA(t, "other-ca")
	req := Request{
		CommonName: "etcd-0",
		DNSNames:   []string{"etcd-0.example.com", "localhost"},
		IPs:        []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("127.0.0.1")},
	}
	tests := []struct {
		name       string
		issue      func() (*Pair, error)
		wantCN     string
		wantServer bool
		wantClient bool
		host       string // a name the certificate must be valid for, if a server
	}{
		{"etcd peer", func() (*Pair, error) { return ca.IssueEtcdPeer(req) }, "etcd-0", true, true, "etcd-0.example.com"},
		{"etcd server", func() (*Pair, error) { return ca.IssueEtcdServer(req) }, "etcd-0", true, true, "10.0.0.5"},
		{"client", func() (*Pair, error) {
			return ca.IssueClient("apiserver-etcd-client", []string{"system:masters"}, ECDSA)
		}, "apiserver-etcd-client", false, true, ""},
		{"apiserver", func() (*Pair, error) {
			return ca.IssueAPIServer(APIServerSANs{DNSNames: []string{"api.example.com"}}, "", 0)
		}, "kube-apiserver", true, false, "api.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := time.Now()
			p, err := tt.issue()
			if err != nil {
				t.Fatal(err)
			}
			c := p.Cert
			if c.Subject.CommonName != tt.wantCN {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tt.wantCN)
			}
			if c.IsCA {
				t.Error("issued certificate is a CA")
			}
			if !bytes.Equal(c.AuthorityKeyId, ca.Cert.SubjectKeyId) {
				t.Errorf("AuthorityKeyId %x, want CA SubjectKeyId %x", c.AuthorityKeyId, ca.Cert.SubjectKeyId)
			}
			if len(c.SubjectKeyId) == 0 || bytes.Equal(c.SubjectKeyId, ca.Cert.SubjectKeyId) {
				t.Errorf("SubjectKeyId %x is missing or the CA's", c.SubjectKeyId)
			}
			if c.SerialNumber.BitLen() < 64 {
				t.Errorf("serial has only %d bits", c.SerialNumber.BitLen())
			}
			if got := before.Sub(c.NotBefore); got < 4*time.Minute || got > 6*time.Minute {
				t.Errorf("NotBefore is %v before now, want about 5m", got)
			}
			if got := c.NotAfter.Sub(before); got < defaultLeafValidity-time.Minute || got > defaultLeafValidity+time.Minute {
				t.Errorf("validity %v, want about one year", got)
			}
			if c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
				t.Error("no DigitalSignature key usage")
			}
			if _, ok := p.Cert.PublicKey.(*ecdsa.PublicKey); !ok {
				t.Errorf("key is %T, want ECDSA", p.Cert.PublicKey)
			}

			host := tt.host
			if err := verify(ca, c, x509.ExtKeyUsageServerAuth, host); (err == nil) != tt.wantServer {
				t.Errorf("ServerAuth verification: err=%v, want success=%v", err, tt.wantServer)
			}
			if err := verify(ca, c, x509.ExtKeyUsageClientAuth, ""); (err == nil) != tt.wantClient {
				t.Errorf("ClientAuth verification: err=%v, want success=%v", err, tt.wantClient)
			}
			if err := verify(other, c, x509.ExtKeyUsageAny, ""); err == nil {
				t.Error("certificate verifies against an unrelated CA")
			}
			if tt.wantServer {
				if err := verify(ca, c, x509.ExtKeyUsageServerAuth, "evil.example.org"); err == nil {
					t.Error("server certificate verifies for a name it does not have")
				}
			}

			info, err := Inspect(p.CertPEM)
			if err != nil {
				t.Fatal(err)
			}
			var wantUsage []string
			if tt.wantServer {
				wantUsage = append(wantUsage, "server")
			}
			if tt.wantClient {
				wantUsage = append(wantUsage, "client")
			}
			if !slices.Equal(info.KeyUsage, wantUsage) {
				t.Errorf("Info.KeyUsage %q, want %q", info.KeyUsage, wantUsage)
			}
			if _, err := p.TLSCertificate(); err != nil {
				t.Errorf("TLSCertificate: %v", err)
			}
		})
	}
}

func TestIssueEtcdSANsAndSerials(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	req := Request{
		CommonName: "etcd-1",
		DNSNames:   []string{"Etcd-1.Example.com.", "etcd-1.example.com", "", "10.9.9.9"},
		IPs:        []net.IP{net.ParseIP("10.0.0.6"), net.IPv4(10, 0, 0, 6).To4()},
		Validity:   48 * time.Hour,
	}
	a, err := ca.IssueEtcdPeer(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.IssueEtcdPeer(req)
	if err != nil {
		t.Fatal(err)
	}
	if a.Cert.SerialNumber.Cmp(b.Cert.SerialNumber) == 0 {
		t.Error("two certificates got the same serial number")
	}
	if want := []string{"etcd-1.example.com"}; !slices.Equal(a.Cert.DNSNames, want) {
		t.Errorf("DNSNames %q, want %q", a.Cert.DNSNames, want)
	}
	if got := ipStrings(a.Cert.IPAddresses); !slices.Equal(got, []string{"10.0.0.6", "10.9.9.9"}) {
		t.Errorf("IPs %q, want 10.0.0.6 and 10.9.9.9 once each", got)
	}
	if got := a.Cert.NotAfter.Sub(a.Cert.NotBefore); got != 48*time.Hour+backdate {
		t.Errorf("validity %v, want 48h+5m", got)
	}
}

func ipStrings(ips []net.IP) []string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	return s
}

func TestIssueErrors(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	ok := Request{CommonName: "etcd-0", IPs: []net.IP{net.ParseIP("10.0.0.1")}}
	with := func(f func(*Request)) Request { r := ok; f(&r); return r }
	tests := []struct {
		name  string
		issue func() (*Pair, error)
		want  []string
	}{
		{"peer without CN", func() (*Pair, error) { return ca.IssueEtcdPeer(with(func(r *Request) { r.CommonName = "" })) },
			[]string{"etcd peer", "common name is empty"}},
		{"server without SANs", func() (*Pair, error) { return ca.IssueEtcdServer(with(func(r *Request) { r.IPs = nil })) },
			[]string{"etcd server certificate for etcd-0", "no DNS names or IPs"}},
		{"bad DNS name", func() (*Pair, error) {
			return ca.IssueEtcdPeer(with(func(r *Request) { r.DNSNames = []string{"ok.example.com", "bad name"} }))
		}, []string{"etcd peer certificate for etcd-0", `DNSNames[1] "bad name"`}},
		{"bad IP", func() (*Pair, error) {
			return ca.IssueEtcdPeer(with(func(r *Request) { r.IPs = []net.IP{{1, 2, 3}} }))
		}, []string{"IPs[0]", "not an IP address"}},
		{"negative validity", func() (*Pair, error) {
			return ca.IssueEtcdPeer(with(func(r *Request) { r.Validity = -time.Second }))
		}, []string{"negative"}},
		{"bad key type", func() (*Pair, error) { return ca.IssueEtcdPeer(with(func(r *Request) { r.KeyType = "dsa" })) },
			[]string{`unknown key type "dsa"`}},
		{"client without CN", func() (*Pair, error) { return ca.IssueClient("", nil, ECDSA) },
			[]string{"client certificate", "common name is empty"}},
		{"apiserver bad SANs", func() (*Pair, error) {
			return ca.IssueAPIServer(APIServerSANs{StaticIP: "1.2.3.999"}, ECDSA, 0)
		}, []string{"kube-apiserver", "StaticIP", "1.2.3.999"}},
	}
	for _, tt := range tests {
		p, err := tt.issue()
		if p != nil {
			t.Errorf("%s: got a pair with the error", tt.name)
		}
		wantErrContains(t, err, tt.want...)
		if !errors.Is(err, errkind.InvalidArgument) {
			t.Errorf("%s: error is not InvalidArgument: %v", tt.name, err)
		}
	}
	if _, err := (&CA{}).IssueClient("x", nil, ECDSA); err == nil {
		t.Error("a CA without a key issued a certificate")
	}
}

func TestIssueValidityCappedByCA(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("short-ca", ECDSA, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.IssueClient("c", nil, ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter %v, want the CA's %v", p.Cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestAPIServerSANsCoverage(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "kubernetes")
	s := APIServerSANs{
		StaticIP:      "203.0.113.10",
		DNSNames:      []string{"api.example.com", "k8s.example.com"},
		ReplicaIPs:    []string{"10.128.0.2", "34.1.2.3", "10.128.0.3", "", "2001:db8::5"},
		ReplicaNames:  []string{"master-0", "master-1.internal"},
		ServiceCIDR:   "10.0.0.0/16",
		ClusterDomain: "corp.local",
	}
	p, err := ca.IssueAPIServer(s, ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Cert
	if c.Subject.CommonName != "kube-apiserver" {
		t.Errorf("CN %q", c.Subject.CommonName)
	}
	wantDNS := []string{
		"api.example.com", "k8s.example.com", "master-0", "master-1.internal",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.corp.local", "localhost",
	}
	wantIPs := []string{
		"203.0.113.10", "10.128.0.2", "34.1.2.3", "10.128.0.3", "2001:db8::5",
		"10.0.0.1", "127.0.0.1",
	}
	for _, n := range wantDNS {
		if !slices.Contains(c.DNSNames, n) {
			t.Errorf("DNS SAN %q missing from %q", n, c.DNSNames)
		}
		if err := verify(ca, c, x509.ExtKeyUsageServerAuth, n); err != nil {
			t.Errorf("does not verify for %q: %v", n, err)
		}
	}
	for _, ip := range wantIPs {
		if !slices.Contains(ipStrings(c.IPAddresses), ip) {
			t.Errorf("IP SAN %s missing from %q", ip, ipStrings(c.IPAddresses))
		}
		if err := verify(ca, c, x509.ExtKeyUsageServerAuth, ip); err != nil {
			t.Errorf("does not verify for %s: %v", ip, err)
		}
	}
	if slices.Contains(c.DNSNames, "kubernetes.default.svc.cluster.local") {
		t.Error("default cluster domain used despite ClusterDomain")
	}
	if slices.Contains(ipStrings(c.IPAddresses), "10.0.0.0") {
		t.Error("service network address used instead of the first usable IP")
	}
	if len(c.DNSNames) != len(wantDNS) || len(c.IPAddresses) != len(wantIPs) {
		t.Errorf("unexpected extra SANs: DNS %q, IPs %q", c.DNSNames, ipStrings(c.IPAddresses))
	}
	if renew, reason := NeedsRenewal(c, wantDNS, c.IPAddresses, 30*24*time.Hour, time.Now()); renew {
		t.Errorf("fresh apiserver certificate needs renewal: %s", reason)
	}
}

func TestAPIServerSANs(t *testing.T) {
	t.Parallel()
	defaults := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	tests := []struct {
		name    string
		in      APIServerSANs
		wantDNS []string
		wantIPs []string
	}{
		{
			name:    "empty gives the in-cluster names and loopback",
			wantDNS: defaults,
			wantIPs: []string{"127.0.0.1"},
		},
		{
			name: "sorted and de-duplicated, IPv4 before IPv6",
			in: APIServerSANs{
				StaticIP:     "10.0.0.9",
				DNSNames:     []string{"B.example.com", "a.example.com", "b.example.com.", "10.0.0.9", "localhost"},
				ReplicaIPs:   []string{"fd00::1", "10.0.0.9", "127.0.0.1", "::ffff:10.0.0.8"},
				ReplicaNames: []string{"a.example.com", " ", "10.0.0.7"},
			},
			wantDNS: append([]string{"a.example.com", "b.example.com"}, defaults...),
			wantIPs: []string{"10.0.0.7", "10.0.0.8", "10.0.0.9", "127.0.0.1", "fd00::1"},
		},
		{
			name:    "service CIDR with host bits set",
			in:      APIServerSANs{ServiceCIDR: "10.96.5.3/12"},
			wantDNS: defaults,
			wantIPs: []string{"10.96.0.1", "127.0.0.1"},
		},
		{
			name:    "IPv6 service CIDR",
			in:      APIServerSANs{ServiceCIDR: "fd00:10:96::/112"},
			wantDNS: defaults,
			wantIPs: []string{"127.0.0.1", "fd00:10:96::1"},
		},
		{
			name:    "cluster domain normalized",
			in:      APIServerSANs{ClusterDomain: "Example.Internal.", DNSNames: []string{"*.api.example.com"}},
			wantDNS: []string{"*.api.example.com", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.example.internal", "localhost"},
			wantIPs: []string{"127.0.0.1"},
		},
	}
	for _, tt := range tests {
		dns, ips, err := tt.in.SANs()
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !slices.Equal(dns, tt.wantDNS) {
			t.Errorf("%s: DNS %q, want %q", tt.name, dns, tt.wantDNS)
		}
		if got := ipStrings(ips); !slices.Equal(got, tt.wantIPs) {
			t.Errorf("%s: IPs %q, want %q", tt.name, got, tt.wantIPs)
		}
		for _, ip := range ips {
			if ip.To4() != nil && len(ip) != net.IPv4len {
				t.Errorf("%s: IPv4 %s is %d bytes long", tt.name, ip, len(ip))
			}
		}
	}
}

func TestAPIServerSANsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   APIServerSANs
		want []string
	}{
		{APIServerSANs{StaticIP: "lb.example.com"}, []string{"StaticIP", `"lb.example.com"`, "not an IP"}},
		{APIServerSANs{StaticIP: "10.0.0.256"}, []string{"StaticIP", "10.0.0.256"}},
		{APIServerSANs{ReplicaIPs: []string{"10.0.0.1", "10.0.0"}}, []string{"ReplicaIPs[1]", `"10.0.0"`}},
		{APIServerSANs{ReplicaIPs: []string{"fe80::1%eth0"}}, []string{"ReplicaIPs[0]", "fe80::1%eth0"}},
		{APIServerSANs{ServiceCIDR: "10.0.0.0"}, []string{"ServiceCIDR", `"10.0.0.0"`}},
		{APIServerSANs{ServiceCIDR: "10.0.0.0/33"}, []string{"ServiceCIDR", "10.0.0.0/33"}},
		{APIServerSANs{ServiceCIDR: "10.0.0.7/32"}, []string{"ServiceCIDR", "no usable address"}},
		{APIServerSANs{DNSNames: []string{"api example.com"}}, []string{"DNSNames[0]", `"api example.com"`}},
		{APIServerSANs{DNSNames: []string{"-bad.example.com"}}, []string{"DNSNames[0]", "-bad.example.com"}},
		{APIServerSANs{ReplicaNames: []string{"ok", "*.wild.example.com"}}, []string{"ReplicaNames[1]", "wildcard"}},
		{APIServerSANs{ClusterDomain: "cluster..local"}, []string{"ClusterDomain", "cluster..local"}},
	}
	for _, tt := range tests {
		dns, ips, err := tt.in.SANs()
		if dns != nil || ips != nil {
			t.Errorf("%+v: SANs returned with the error", tt.in)
		}
		wantErrContains(t, err, tt.want...)
		if !errors.Is(err, errkind.InvalidArgument) {
			t.Errorf("%+v: error is not InvalidArgument: %v", tt.in, err)
		}
	}
}

func TestRSA(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("rsa-ca", RSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	caKey, ok := ca.Key.(*rsa.PrivateKey)
	if !ok || caKey.N.BitLen() != 2048 {
		t.Fatalf("CA key %T, want 2048-bit RSA", ca.Key)
	}
	if ca.Cert.SignatureAlgorithm != x509.SHA256WithRSA {
		t.Errorf("CA signature %v", ca.Cert.SignatureAlgorithm)
	}
	p, err := ca.IssueEtcdServer(Request{CommonName: "etcd-0", DNSNames: []string{"etcd-0"}, KeyType: RSA})
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := p.Cert.PublicKey.(*rsa.PublicKey)
	if !ok || pub.N.BitLen() != 2048 {
		t.Fatalf("leaf key %T, want 2048-bit RSA", p.Cert.PublicKey)
	}
	if p.Cert.KeyUsage&x509.KeyUsageKeyEncipherment == 0 {
		t.Error("RSA leaf lacks KeyEncipherment")
	}
	if err := verify(ca, p.Cert, x509.ExtKeyUsageServerAuth, "etcd-0"); err != nil {
		t.Errorf("RSA chain does not verify: %v", err)
	}
	if b, _ := pem.Decode(p.KeyPEM); b == nil || b.Type != "RSA PRIVATE KEY" {
		t.Errorf("RSA key is not written as PKCS#1")
	}

	// Round trip of the RSA CA (PKCS#1) and the leaf re-encoded as PKCS#8.
	dir := t.TempDir()
	if err := ca.Write(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := loaded.Key.(*rsa.PrivateKey); !ok || !k.Equal(caKey) {
		t.Error("loaded RSA CA key differs")
	}
	leafKey, err := parseKeyPEM(p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "leaf.crt"), p.CertPEM)
	writeFile(t, filepath.Join(dir, "leaf.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if _, err := LoadPair(filepath.Join(dir, "leaf.crt"), filepath.Join(dir, "leaf.key")); err != nil {
		t.Errorf("PKCS#8 RSA key: %v", err)
	}
}

func TestWriteLoadRoundTrip(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	pair, err := ca.IssueEtcdPeer(Request{CommonName: "etcd-0", IPs: []net.IP{net.ParseIP("10.0.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "pki", "etcd")
	caCert, caKey := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	peerCert, peerKey := filepath.Join(dir, "peer.crt"), filepath.Join(dir, "peer.key")

	// A stale, world-readable key must end up 0600 after Write replaces it.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(peerKey, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(caCert, caKey); err != nil {
		t.Fatal(err)
	}
	if err := pair.Write(peerCert, peerKey); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		caCert: 0o644, caKey: 0o600, peerCert: 0o644, peerKey: 0o600,
		filepath.Join(root, "pki"): 0o700 | os.ModeDir,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %q, want only the four files (no temp files)", names)
	}

	loadedCA, err := LoadCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loadedCA.Cert.Raw, ca.Cert.Raw) || !bytes.Equal(loadedCA.CertPEM, ca.CertPEM) {
		t.Error("loaded CA certificate differs")
	}
	// The loaded key must be able to sign certificates the original pool trusts.
	issued, err := loadedCA.IssueClient("from-loaded", nil, ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ca, issued.Cert, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("certificate issued by the loaded CA: %v", err)
	}

	loadedPair, err := LoadPair(peerCert, peerKey)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loadedPair.Cert.Raw, pair.Cert.Raw) || !bytes.Equal(loadedPair.KeyPEM, pair.KeyPEM) {
		t.Error("loaded pair differs")
	}
	if err := verify(ca, loadedPair.Cert, x509.ExtKeyUsageServerAuth, "10.0.0.5"); err != nil {
		t.Error(err)
	}

	// Writing into a path whose parent is a file fails and leaves nothing.
	blocker := filepath.Join(root, "file")
	writeFile(t, blocker, []byte("x"))
	if err := pair.Write(filepath.Join(blocker, "a.crt"), filepath.Join(blocker, "a.key")); err == nil {
		t.Error("Write under a regular file succeeded")
	} else {
		wantErrContains(t, err, "a.key")
	}
}

func TestLoadKeyFormats(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	p, err := ca.IssueClient("c", nil, ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	key, err := parseKeyPEM(p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	params := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}})
	enc := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	tests := []struct {
		name string
		key  []byte
	}{
		{"SEC1", enc("EC PRIVATE KEY", sec1)},
		{"PKCS8", enc("PRIVATE KEY", pkcs8)},
		{"SEC1 after EC PARAMETERS", append(params, enc("EC PRIVATE KEY", sec1)...)},
		{"PKCS8 labelled as SEC1", enc("EC PRIVATE KEY", pkcs8)},
	}
	dir := t.TempDir()
	certPath := filepath.Join(dir, "c.crt")
	writeFile(t, certPath, p.CertPEM)
	for i, tt := range tests {
		keyPath := filepath.Join(dir, "k"+string(rune('0'+i)))
		writeFile(t, keyPath, tt.key)
		loaded, err := LoadPair(certPath, keyPath)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if _, err := loaded.TLSCertificate(); err != nil && tt.name != "PKCS8 labelled as SEC1" {
			t.Errorf("%s: TLSCertificate: %v", tt.name, err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	p, err := ca.IssueClient("c", nil, ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ca.IssueClient("d", nil, ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, err := encodeKeyPEM(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{
		"ca.crt":    ca.CertPEM,
		"ca.key":    caKeyPEM,
		"leaf.crt":  p.CertPEM,
		"leaf.key":  p.KeyPEM,
		"other.key": q.KeyPEM,
		"garbage":   []byte("not PEM at all"),
		"encrypted": pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}),
		"badder":    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}),
	}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	tests := []struct {
		name string
		load func() error
		want []string
	}{
		{"missing cert", func() error { _, err := LoadCA(f("nope.crt"), f("ca.key")); return err }, []string{f("nope.crt")}},
		{"missing key", func() error { _, err := LoadPair(f("leaf.crt"), f("nope.key")); return err }, []string{f("nope.key")}},
		{"key as cert", func() error { _, err := LoadPair(f("leaf.key"), f("leaf.key")); return err },
			[]string{f("leaf.key"), `"EC PRIVATE KEY", not a CERTIFICATE`}},
		{"garbage cert", func() error { _, err := LoadCA(f("garbage"), f("ca.key")); return err },
			[]string{f("garbage"), "no PEM data"}},
		{"bad DER", func() error { _, err := LoadPair(f("badder"), f("leaf.key")); return err },
			[]string{f("badder"), "parse certificate"}},
		{"cert as key", func() error { _, err := LoadPair(f("leaf.crt"), f("leaf.crt")); return err },
			[]string{f("leaf.crt"), "not a private key"}},
		{"encrypted key", func() error { _, err := LoadPair(f("leaf.crt"), f("encrypted")); return err },
			[]string{f("encrypted"), "encrypted"}},
		{"mismatched key", func() error { _, err := LoadPair(f("leaf.crt"), f("other.key")); return err },
			[]string{f("other.key"), "does not match"}},
		{"CA with leaf key", func() error { _, err := LoadCA(f("ca.crt"), f("leaf.key")); return err },
			[]string{f("leaf.key"), "does not match"}},
		{"leaf as CA", func() error { _, err := LoadCA(f("leaf.crt"), f("leaf.key")); return err },
			[]string{f("leaf.crt"), "not a CA"}},
		{"inspect key file", func() error { _, err := InspectFile(f("leaf.key")); return err },
			[]string{f("leaf.key"), "not a CERTIFICATE"}},
		{"inspect missing", func() error { _, err := InspectFile(f("nope")); return err }, []string{f("nope")}},
		{"fingerprint of key", func() error { _, err := SHA256Fingerprint(p.KeyPEM); return err }, []string{"not a CERTIFICATE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantErrContains(t, tt.load(), tt.want...)
		})
	}
	if _, err := LoadCA(f("ca.crt"), f("ca.key")); err != nil {
		t.Errorf("the good CA files do not load: %v", err)
	}
}

func TestLoadOrCreateCA(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pki")
	ca1, created, err := LoadOrCreateCA(dir, "etcd-ca", "")
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Error("first call: created=false")
	}
	ca2, created, err := LoadOrCreateCA(dir, "ignored-name", RSA)
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Error("second call: created=true")
	}
	fp1, err := SHA256Fingerprint(ca1.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	fp2, err := SHA256Fingerprint(ca2.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if fp1 != fp2 || ca2.Cert.Subject.CommonName != "etcd-ca" {
		t.Errorf("second call returned a different CA: %s %q vs %s", fp2, ca2.Cert.Subject.CommonName, fp1)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode() != 0o600 {
		t.Errorf("ca.key: %v %v", fi, err)
	}

	for _, missing := range []string{"ca.key", "ca.crt"} {
		lone := t.TempDir()
		if err := ca1.Write(filepath.Join(lone, "ca.crt"), filepath.Join(lone, "ca.key")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(lone, missing)); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateCA(lone, "etcd-ca", ECDSA)
		wantErrContains(t, err, missing, "refusing")
		if _, err := os.Stat(filepath.Join(lone, missing)); err == nil {
			t.Errorf("LoadOrCreateCA created %s next to a lone file", missing)
		}
	}
}

func TestNeedsRenewal(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	p, err := ca.IssueEtcdServer(Request{
		CommonName: "etcd-0",
		DNSNames:   []string{"etcd-0.example.com", "*.apps.example.com"},
		IPs:        []net.IP{net.ParseIP("10.0.0.5")},
		Validity:   90 * 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	cert := p.Cert
	day := 24 * time.Hour
	window := 30 * day
	end := cert.NotAfter
	ip := func(s string) net.IP { return net.ParseIP(s) }
	tests := []struct {
		name       string
		cert       *x509.Certificate
		dns        []string
		ips        []net.IP
		now        time.Time
		wantRenew  bool
		wantReason string
	}{
		{"fine", cert, []string{"etcd-0.example.com"}, []net.IP{ip("10.0.0.5")}, end.Add(-60 * day), false, ""},
		{"fine without wants", cert, nil, nil, end.Add(-31 * day), false, ""},
		{"expiring", cert, nil, nil, end.Add(-3 * day), true, "expires in 3d, within the 30d renewal window"},
		{"expiring in hours", cert, nil, nil, end.Add(-5*time.Hour - 30*time.Minute), true, "expires in 5h30m, within the 30d renewal window"},
		{"at the window edge", cert, nil, nil, end.Add(-window), true, "expires in 30d, within the 30d renewal window"},
		{"expired", cert, nil, nil, end.Add(2 * day), true, "expired 2d ago"},
		{"missing SANs", cert, []string{"etcd-0.example.com", "lb.example.com"}, []net.IP{ip("10.0.0.5"), ip("10.1.2.3")},
			end.Add(-60 * day), true, "missing SANs: IP 10.1.2.3, DNS lb.example.com"},
		{"missing SANs de-duplicated", cert, []string{"LB.example.com", "lb.example.com."}, []net.IP{ip("10.1.2.3"), ip("10.1.2.3").To4()},
			end.Add(-60 * day), true, "missing SANs: IP 10.1.2.3, DNS lb.example.com"},
		{"IP wanted as DNS name", cert, []string{"10.0.0.5"}, nil, end.Add(-60 * day), true, "missing SANs: DNS 10.0.0.5"},
		{"case and trailing dot", cert, []string{"ETCD-0.Example.COM."}, []net.IP{net.IPv4(10, 0, 0, 5).To4()}, end.Add(-60 * day), false, ""},
		{"wildcard covers", cert, []string{"foo.apps.example.com"}, nil, end.Add(-60 * day), false, ""},
		{"wildcard does not cover deeper", cert, []string{"a.b.apps.example.com"}, nil, end.Add(-60 * day), true, "missing SANs: DNS a.b.apps.example.com"},
		{"expiring and missing", cert, nil, []net.IP{ip("10.1.2.3")}, end.Add(-3 * day), true,
			"expires in 3d, within the 30d renewal window; missing SANs: IP 10.1.2.3"},
		{"no certificate", nil, nil, nil, end, true, "no certificate"},
	}
	for _, tt := range tests {
		renew, reason := NeedsRenewal(tt.cert, tt.dns, tt.ips, window, tt.now)
		if renew != tt.wantRenew || reason != tt.wantReason {
			t.Errorf("%s: NeedsRenewal = %v, %q; want %v, %q", tt.name, renew, reason, tt.wantRenew, tt.wantReason)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0m"},
		{20 * time.Second, "0m"},
		{12 * time.Minute, "12m"},
		{2 * time.Hour, "2h"},
		{26 * time.Hour, "1d2h"},
		{30 * 24 * time.Hour, "30d"},
		{-3 * 24 * time.Hour, "3d"},
	}
	for _, tt := range tests {
		if got := formatDuration(tt.in); got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test-ca")
	p, err := ca.IssueEtcdPeer(Request{CommonName: "etcd-0", DNSNames: []string{"etcd-0"}, IPs: []net.IP{net.ParseIP("10.0.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "peer.crt")
	// A chain after the leaf is ignored.
	writeFile(t, path, append(append([]byte{}, p.CertPEM...), ca.CertPEM...))
	sum := sha256.Sum256(p.Cert.Raw)
	for name, get := range map[string]func() (Info, error){
		"Inspect":     func() (Info, error) { return Inspect(p.CertPEM) },
		"InspectFile": func() (Info, error) { return InspectFile(path) },
	} {
		info, err := get()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if info.Subject != "CN=etcd-0" || info.Issuer != "CN=test-ca" {
			t.Errorf("%s: subject %q issuer %q", name, info.Subject, info.Issuer)
		}
		if !slices.Equal(info.DNSNames, []string{"etcd-0"}) || !slices.Equal(info.IPs, []string{"10.0.0.5"}) {
			t.Errorf("%s: SANs %q %q", name, info.DNSNames, info.IPs)
		}
		if !info.NotBefore.Equal(p.Cert.NotBefore) || !info.NotAfter.Equal(p.Cert.NotAfter) {
			t.Errorf("%s: validity %v..%v", name, info.NotBefore, info.NotAfter)
		}
		if info.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SHA256 %s", name, info.SHA256)
		}
		if info.IsCA || !slices.Equal(info.KeyUsage, []string{"server", "client"}) {
			t.Errorf("%s: IsCA %v KeyUsage %q", name, info.IsCA, info.KeyUsage)
		}
	}
	caInfo, err := Inspect(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !caInfo.IsCA || caInfo.Subject != caInfo.Issuer {
		t.Errorf("CA info %+v", caInfo)
	}
	fp, err := SHA256Fingerprint(p.CertPEM)
	if err != nil || fp != hex.EncodeToString(sum[:]) || len(fp) != 64 {
		t.Errorf("SHA256Fingerprint = %q, %v", fp, err)
	}
	for _, bad := range [][]byte{nil, []byte("junk"), p.KeyPEM} {
		if _, err := Inspect(bad); err == nil {
			t.Errorf("Inspect(%.20q) succeeded", bad)
		}
	}
}

// handshake runs a TLS server on a loopback listener, connects a client,
// and exchanges one message. It returns the server's and the client's error
// and the common name of the client certificate the server saw.
func handshake(t *testing.T, server, client *tls.Config) (peerCN string, serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		err error
		cn  string
	}
	done := make(chan result, 1)
	deadline := time.Now().Add(5 * time.Second)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		s := tls.Server(c, server)
		if err := s.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		var cn string
		if pc := s.ConnectionState().PeerCertificates; len(pc) > 0 {
			cn = pc[0].Subject.CommonName
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(s, buf); err != nil {
			done <- result{err: err}
			return
		}
		_, err = s.Write(buf)
		done <- result{err: err, cn: cn}
	}()
	clientErr = func() error {
		d := &net.Dialer{Deadline: deadline}
		c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), client)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "ping" {
			return errors.New("echo mismatch")
		}
		return nil
	}()
	r := <-done
	return r.cn, r.err, clientErr
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "etcd-ca")
	other := newTestCA(t, "other-ca")
	tlsCert := func(p *Pair, err error) tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		if c.Leaf == nil {
			t.Fatal("TLSCertificate left Leaf nil")
		}
		return c
	}
	serverReq := Request{CommonName: "etcd-0", DNSNames: []string{"etcd-0.internal"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	server := tlsCert(ca.IssueEtcdServer(serverReq))
	peer := tlsCert(ca.IssueEtcdPeer(Request{CommonName: "etcd-1", IPs: []net.IP{net.IPv4(127, 0, 0, 2)}}))
	client := tlsCert(ca.IssueClient("apiserver-etcd-client", []string{"system:masters"}, ECDSA))
	apiserver := tlsCert(ca.IssueAPIServer(APIServerSANs{}, ECDSA, 0))
	foreignServer := tlsCert(other.IssueEtcdServer(serverReq))
	foreignClient := tlsCert(other.IssueClient("intruder", nil, ECDSA))

	tests := []struct {
		name          string
		serverCert    tls.Certificate
		clientCerts   []tls.Certificate
		serverName    string
		wantOK        bool
		wantServerErr bool // the server must reject the client
		wantCN        string
	}{
		{"client cert", server, []tls.Certificate{client}, "etcd-0.internal", true, false, "apiserver-etcd-client"},
		{"peer cert as client, IP name", server, []tls.Certificate{peer}, "127.0.0.1", true, false, "etcd-1"},
		{"server cert as client", server, []tls.Certificate{server}, "etcd-0.internal", true, false, "etcd-0"},
		{"apiserver cert lacks ClientAuth", server, []tls.Certificate{apiserver}, "etcd-0.internal", false, true, ""},
		{"no client cert", server, nil, "etcd-0.internal", false, true, ""},
		{"client from another CA", server, []tls.Certificate{foreignClient}, "etcd-0.internal", false, true, ""},
		{"server from another CA", foreignServer, []tls.Certificate{client}, "etcd-0.internal", false, false, ""},
		{"wrong server name", server, []tls.Certificate{client}, "etcd-9.internal", false, false, ""},
		{"client cert as server", client, []tls.Certificate{client}, "etcd-0.internal", false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			serverCfg := &tls.Config{
				Certificates: []tls.Certificate{tt.serverCert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    ca.Pool(),
				MinVersion:   tls.VersionTLS12,
			}
			clientCfg := &tls.Config{
				Certificates: tt.clientCerts,
				RootCAs:      ca.Pool(),
				ServerName:   tt.serverName,
				MinVersion:   tls.VersionTLS12,
			}
			cn, serverErr, clientErr := handshake(t, serverCfg, clientCfg)
			if tt.wantOK {
				if serverErr != nil || clientErr != nil {
					t.Fatalf("handshake failed: server %v, client %v", serverErr, clientErr)
				}
				if cn != tt.wantCN {
					t.Errorf("server saw client CN %q, want %q", cn, tt.wantCN)
				}
				return
			}
			if serverErr == nil && clientErr == nil {
				t.Fatal("handshake succeeded, want failure")
			}
			if tt.wantServerErr && serverErr == nil {
				t.Errorf("server accepted the client (client error: %v)", clientErr)
			}
			if !tt.wantServerErr && clientErr == nil {
				t.Errorf("client accepted the server (server error: %v)", serverErr)
			}
		})
	}
}

func TestLoadOrCreateServiceAccountKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "service-account.key")
	created, err := LoadOrCreateServiceAccountKey(path, ECDSA)
	if err != nil || !created {
		t.Fatalf("first call: created=%v err=%v, want a new key", created, err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseKeyPEM(first); err != nil {
		t.Fatalf("written key does not parse: %v", err)
	}
	created, err = LoadOrCreateServiceAccountKey(path, ECDSA)
	if err != nil || created {
		t.Fatalf("second call: created=%v err=%v, want the existing key kept", created, err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Fatal("second call replaced the key: replicas would stop verifying each other's tokens")
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateServiceAccountKey(bad, ECDSA); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("garbage key file: err=%v, want an error naming %s", err, bad)
	}
}
