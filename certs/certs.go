// Package certs is hamaster's small PKI: it creates and loads certificate
// authorities, issues the certificates an HA control plane needs (etcd peer,
// etcd server, clients such as apiserver-etcd-client, and kube-apiserver
// serving certificates), writes them to disk atomically, and inspects them to
// decide when they must be renewed.
//
// Everything is built on the standard library. Keys are ECDSA P-256 by
// default and RSA 2048 on request; private keys are written as SEC1
// ("EC PRIVATE KEY") or PKCS#1 ("RSA PRIVATE KEY") and read back from PKCS#1,
// SEC1 or PKCS#8.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// KeyType selects the algorithm of a newly generated private key.
type KeyType string

const (
	// ECDSA is an ECDSA key on curve P-256, the default. The empty KeyType
	// means ECDSA too.
	ECDSA KeyType = "ecdsa"
	// RSA is a 2048-bit RSA key.
	RSA KeyType = "rsa"
)

const (
	// rsaBits is the size of generated RSA keys.
	rsaBits = 2048
	// defaultCAValidity is how long a CA is valid when NewCA is given 0.
	defaultCAValidity = 10 * 365 * 24 * time.Hour
	// defaultLeafValidity is how long an issued certificate is valid when
	// its request says 0.
	defaultLeafValidity = 365 * 24 * time.Hour
	// backdate moves NotBefore into the past to tolerate clock skew
	// between the machine that issues and the machines that verify.
	backdate = 5 * time.Minute
	// CA file names used by LoadOrCreateCA.
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
)

// ParseKeyType parses a key type as given on a command line or in a config
// file: "" (meaning ECDSA), "ecdsa" or "rsa", case-insensitively. Any other
// value is an errkind.InvalidArgument error that names the valid values.
func ParseKeyType(s string) (KeyType, error) {
	switch KeyType(strings.ToLower(strings.TrimSpace(s))) {
	case "", ECDSA:
		return ECDSA, nil
	case RSA:
		return RSA, nil
	default:
		return "", errkind.Errorf(errkind.InvalidArgument,
			"unknown key type %q: valid values are %q (the default) and %q", s, ECDSA, RSA)
	}
}

// generateKey makes a new private key of type kt.
func generateKey(kt KeyType) (crypto.Signer, error) {
	switch kt {
	case "", ECDSA:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate ECDSA P-256 key: %w", err)
		}
		return k, nil
	case RSA:
		k, err := rsa.GenerateKey(rand.Reader, rsaBits)
		if err != nil {
			return nil, fmt.Errorf("generate RSA %d key: %w", rsaBits, err)
		}
		return k, nil
	default:
		_, err := ParseKeyType(string(kt))
		return nil, err
	}
}

// CA is a certificate authority able to sign certificates.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key is the CA's private key; it signs issued certificates.
	Key crypto.Signer
	// CertPEM is the PEM encoding of Cert (for a loaded CA, the file's
	// content as read).
	CertPEM []byte
}

// NewCA creates a self-signed CA named commonName with a new key of type kt.
// The CA is valid from five minutes ago for validity (0 means ten years);
// it may sign end-entity certificates only (MaxPathLen 0).
func NewCA(commonName string, kt KeyType, validity time.Duration) (*CA, error) {
	ca, err := newCA(commonName, kt, validity, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create CA %q: %w", commonName, err)
	}
	return ca, nil
}

func newCA(commonName string, kt KeyType, validity time.Duration, now time.Time) (*CA, error) {
	if strings.TrimSpace(commonName) == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "common name is empty")
	}
	if validity < 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "validity %v is negative", validity)
	}
	if validity == 0 {
		validity = defaultCAValidity
	}
	key, serial, skid, err := newCertKey(kt)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
		AuthorityKeyId:        skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(der)}, nil
}

// LoadCA reads a CA certificate and its private key from PEM files. The key
// may be PKCS#1, SEC1 or PKCS#8; it must match the certificate, and the
// certificate must be a CA. Errors name the offending file.
func LoadCA(certPath, keyPath string) (*CA, error) {
	cert, certPEM, key, _, err := loadFiles("CA ", certPath, keyPath)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("load CA certificate %s: %q is not a CA certificate", certPath, cert.Subject.CommonName)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// Write stores the CA certificate at certPath (mode 0644) and its key at
// keyPath (mode 0600, SEC1 or PKCS#1 PEM). Each file is replaced atomically:
// a reader sees either the old or the new content, never a partial key.
// Missing parent directories are created with mode 0700. The key is written
// first, so an interrupted Write leaves a key that LoadCA reports as not
// matching the certificate rather than a silently inconsistent CA.
func (ca *CA) Write(certPath, keyPath string) error {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return errors.New("write CA: CA has no certificate or no key")
	}
	keyPEM, err := encodeKeyPEM(ca.Key)
	if err != nil {
		return fmt.Errorf("write CA key %s: %w", keyPath, err)
	}
	certPEM := ca.CertPEM
	if len(certPEM) == 0 {
		certPEM = encodeCertPEM(ca.Cert.Raw)
	}
	return writePair(certPath, certPEM, keyPath, keyPEM, "CA")
}

// LoadOrCreateCA loads the CA stored as dir/ca.crt and dir/ca.key, or, when
// neither file exists, creates one named commonName with a key of type kt
// (valid ten years), writes it there and reports created. An existing CA is
// returned as is, whatever its name and key type. If only one of the two
// files exists it is an error: LoadOrCreateCA never overwrites a lone key or
// certificate. It is not safe for several processes to call it on the same
// dir at the same time.
func LoadOrCreateCA(dir, commonName string, kt KeyType) (ca *CA, created bool, err error) {
	certPath := filepath.Join(dir, caCertFile)
	keyPath := filepath.Join(dir, caKeyFile)
	certExists, err := exists(certPath)
	if err != nil {
		return nil, false, fmt.Errorf("load or create CA in %s: %w", dir, err)
	}
	keyExists, err := exists(keyPath)
	if err != nil {
		return nil, false, fmt.Errorf("load or create CA in %s: %w", dir, err)
	}
	switch {
	case certExists && keyExists:
		ca, err := LoadCA(certPath, keyPath)
		if err != nil {
			return nil, false, err
		}
		return ca, false, nil
	case certExists:
		return nil, false, errkind.Errorf(errkind.FailedPrecondition,
			"load or create CA in %s: %s exists but %s does not; refusing to replace the certificate", dir, certPath, keyPath)
	case keyExists:
		return nil, false, errkind.Errorf(errkind.FailedPrecondition,
			"load or create CA in %s: %s exists but %s does not; refusing to replace the key", dir, keyPath, certPath)
	}
	ca, err = NewCA(commonName, kt, 0)
	if err != nil {
		return nil, false, err
	}
	if err := ca.Write(certPath, keyPath); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// Pool returns a certificate pool holding only the CA certificate, for
// tls.Config.RootCAs / ClientCAs and x509.VerifyOptions.Roots.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	if ca != nil && ca.Cert != nil {
		pool.AddCert(ca.Cert)
	}
	return pool
}

// exists reports whether path exists; errors other than "not exist" (for
// example permission denied) are returned.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// randomSerial returns a random positive 128-bit serial number.
// newCertKey makes what a new certificate needs of its own: a key of
// type kt, a random serial number and the key's subject key ID.
func newCertKey(kt KeyType) (key crypto.Signer, serial *big.Int, skid []byte, err error) {
	if key, err = generateKey(kt); err != nil {
		return nil, nil, nil, err
	}
	if serial, err = randomSerial(); err != nil {
		return nil, nil, nil, err
	}
	if skid, err = subjectKeyID(key.Public()); err != nil {
		return nil, nil, nil, err
	}
	return key, serial, skid, nil
}

func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("generate serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID computes a key identifier as RFC 7093 section 2 method 1: the
// leftmost 160 bits of the SHA-256 hash of the subjectPublicKey bit string.
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("marshal public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}

// keyMatches checks that key is the private half of cert's public key.
func keyMatches(cert *x509.Certificate, key crypto.Signer) error {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return fmt.Errorf("unsupported public key type %T", key.Public())
	}
	if !pub.Equal(cert.PublicKey) {
		return fmt.Errorf("private key does not match the public key of certificate %q", cert.Subject.CommonName)
	}
	return nil
}
