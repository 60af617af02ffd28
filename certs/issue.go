package certs

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// Pair is an issued certificate with its private key.
type Pair struct {
	// Cert is the parsed certificate (the first one of CertPEM).
	Cert *x509.Certificate
	// CertPEM is the PEM-encoded certificate; for a loaded pair, the
	// certificate file's content as read (possibly followed by a chain).
	CertPEM []byte
	// KeyPEM is the PEM-encoded private key.
	KeyPEM []byte
}

// Write stores the certificate at certPath (mode 0644) and the key at
// keyPath (mode 0600) with the same guarantees as CA.Write: each file is
// replaced atomically and missing parent directories are created 0700.
func (p *Pair) Write(certPath, keyPath string) error {
	if p == nil || len(p.CertPEM) == 0 || len(p.KeyPEM) == 0 {
		return errors.New("write certificate: pair has no certificate or no key")
	}
	return writePair(certPath, p.CertPEM, keyPath, p.KeyPEM, "certificate")
}

// LoadPair reads a certificate and its private key from PEM files. The key
// may be PKCS#1, SEC1 or PKCS#8 and must match the certificate. Errors name
// the offending file.
func LoadPair(certPath, keyPath string) (*Pair, error) {
	cert, certPEM, _, keyPEM, err := loadFiles("", certPath, keyPath)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// loadFiles reads a certificate and its matching key; what ("CA " or "")
// prefixes the nouns of the errors, which name the offending file.
func loadFiles(what, certPath, keyPath string) (*x509.Certificate, []byte, crypto.Signer, []byte, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("load %scertificate: %w", what, err)
	}
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("load %scertificate %s: %w", what, certPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("load %skey: %w", what, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("load %skey %s: %w", what, keyPath, err)
	}
	if err := keyMatches(cert, key); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("load %skey %s for certificate %s: %w", what, keyPath, certPath, err)
	}
	return cert, certPEM, key, keyPEM, nil
}

// TLSCertificate returns the pair as a tls.Certificate, with Leaf set, for
// tls.Config.Certificates.
func (p *Pair) TLSCertificate() (tls.Certificate, error) {
	if p == nil {
		return tls.Certificate{}, errors.New("TLS certificate: nil pair")
	}
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS certificate: %w", err)
	}
	if c.Leaf == nil {
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("TLS certificate: %w", err)
		}
		c.Leaf = leaf
	}
	return c, nil
}

// Request describes an etcd certificate to issue.
type Request struct {
	// CommonName is the certificate's subject CN, usually the member name.
	CommonName string
	// DNSNames are the host names the certificate is valid for. Entries
	// that are IP addresses are treated as IPs; empty entries are skipped.
	DNSNames []string
	// IPs are the addresses the certificate is valid for.
	IPs []net.IP
	// Validity is how long the certificate is valid; 0 means one year. It
	// is cut short to the CA's own expiry.
	Validity time.Duration
	// KeyType is the type of the new key; "" means ECDSA.
	KeyType KeyType
}

// IssueEtcdPeer issues an etcd peer certificate, used both to serve and to
// dial other members (ExtKeyUsage ServerAuth and ClientAuth). The request
// must name at least one DNS name or IP.
func (ca *CA) IssueEtcdPeer(req Request) (*Pair, error) {
	p, err := ca.issueRequest(req, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, fmt.Errorf("issue etcd peer certificate for %s: %w", req.CommonName, err)
	}
	return p, nil
}

// IssueEtcdServer issues an etcd client-facing serving certificate. It has
// ExtKeyUsage ServerAuth and ClientAuth because etcd also uses it as a
// client certificate (gateway, grpc-proxy, its own health checks). The
// request must name at least one DNS name or IP.
func (ca *CA) IssueEtcdServer(req Request) (*Pair, error) {
	p, err := ca.issueRequest(req, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, fmt.Errorf("issue etcd server certificate for %s: %w", req.CommonName, err)
	}
	return p, nil
}

// IssueClient issues a client certificate (ExtKeyUsage ClientAuth only),
// such as an etcd client or apiserver-etcd-client, with subject CN
// commonName and O org, valid one year.
func (ca *CA) IssueClient(commonName string, org []string, kt KeyType) (*Pair, error) {
	return ca.IssueClientFor(commonName, org, kt, 0)
}

// IssueClientFor is IssueClient valid for validity (0 means one year;
// never past the CA's own expiry).
func (ca *CA) IssueClientFor(commonName string, org []string, kt KeyType, validity time.Duration) (*Pair, error) {
	p, err := ca.issue(leafSpec{
		subject:  pkix.Name{CommonName: commonName, Organization: org},
		extUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		keyType:  kt,
		validity: validity,
	})
	if err != nil {
		return nil, fmt.Errorf("issue client certificate for %s: %w", commonName, err)
	}
	return p, nil
}

// apiServerCN is the subject CN of kube-apiserver serving certificates.
const apiServerCN = "kube-apiserver"

// IssueAPIServer issues a kube-apiserver serving certificate (CN
// "kube-apiserver", ExtKeyUsage ServerAuth) valid for every name and
// address s.SANs returns, for validity (0 means one year).
func (ca *CA) IssueAPIServer(s APIServerSANs, kt KeyType, validity time.Duration) (*Pair, error) {
	dns, ips, err := s.SANs()
	if err != nil {
		return nil, fmt.Errorf("issue kube-apiserver certificate: %w", err)
	}
	p, err := ca.issue(leafSpec{
		subject:  pkix.Name{CommonName: apiServerCN},
		dnsNames: dns,
		ips:      ips,
		extUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		keyType:  kt,
		validity: validity,
	})
	if err != nil {
		return nil, fmt.Errorf("issue kube-apiserver certificate: %w", err)
	}
	return p, nil
}

// leafSpec is what varies between the kinds of issued certificates.
type leafSpec struct {
	subject  pkix.Name
	dnsNames []string
	ips      []net.IP
	extUsage []x509.ExtKeyUsage
	keyType  KeyType
	validity time.Duration
}

// issueRequest validates and normalizes an etcd Request and issues it.
func (ca *CA) issueRequest(req Request, usage []x509.ExtKeyUsage) (*Pair, error) {
	var b sanBuilder
	for i, n := range req.DNSNames {
		if err := b.addName(fmt.Sprintf("DNSNames[%d]", i), n, true); err != nil {
			return nil, err
		}
	}
	for i, ip := range req.IPs {
		if err := b.addNetIP(fmt.Sprintf("IPs[%d]", i), ip); err != nil {
			return nil, err
		}
	}
	dns, ips := b.result()
	if len(dns) == 0 && len(ips) == 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "no DNS names or IPs: a serving certificate needs at least one")
	}
	return ca.issue(leafSpec{
		subject:  pkix.Name{CommonName: req.CommonName},
		dnsNames: dns,
		ips:      ips,
		extUsage: usage,
		keyType:  req.KeyType,
		validity: req.Validity,
	})
}

// issue signs a new end-entity certificate described by spec with a fresh key.
func (ca *CA) issue(spec leafSpec) (*Pair, error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, errors.New("CA has no certificate or no key")
	}
	if strings.TrimSpace(spec.subject.CommonName) == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "common name is empty")
	}
	if spec.validity < 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "validity %v is negative", spec.validity)
	}
	if spec.validity == 0 {
		spec.validity = defaultLeafValidity
	}
	now := time.Now()
	if !now.Before(ca.Cert.NotAfter) {
		return nil, errkind.Errorf(errkind.FailedPrecondition,
			"CA %q expired at %s", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(spec.validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	key, serial, skid, err := newCertKey(spec.keyType)
	if err != nil {
		return nil, err
	}
	usage := x509.KeyUsageDigitalSignature
	if _, ok := key.(*rsa.PrivateKey); ok {
		usage |= x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               spec.subject,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           spec.extUsage,
		BasicConstraintsValid: true,
		IsCA:                  false,
		SubjectKeyId:          skid,
		AuthorityKeyId:        ca.Cert.SubjectKeyId,
		DNSNames:              spec.dnsNames,
		IPAddresses:           spec.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse issued certificate: %w", err)
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, CertPEM: encodeCertPEM(der), KeyPEM: keyPEM}, nil
}
