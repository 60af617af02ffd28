package certs

import "fmt"

// ParseCA builds a CA from PEM bytes held somewhere other than files (a
// kube-env's ETCD_CA_CERT / ETCD_CA_KEY, say). The key must match the
// certificate and the certificate must be a CA.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA key: %w", err)
	}
	if err := keyMatches(cert, key); err != nil {
		return nil, fmt.Errorf("CA %q: %w", cert.Subject.CommonName, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%q is not a CA certificate", cert.Subject.CommonName)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// KeyPEM is the PEM encoding of the CA's private key.
func (ca *CA) KeyPEM() ([]byte, error) { return encodeKeyPEM(ca.Key) }
