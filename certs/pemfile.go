package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

const (
	pemCertificate = "CERTIFICATE"
	pemECKey       = "EC PRIVATE KEY"
	pemRSAKey      = "RSA PRIVATE KEY"
	pemPKCS8Key    = "PRIVATE KEY"
	pemEncrypted   = "ENCRYPTED PRIVATE KEY"
	pemECParams    = "EC PARAMETERS"
)

// encodeCertPEM wraps a DER certificate in a CERTIFICATE PEM block.
func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
}

// ParseCertPEM decodes the first PEM block of data, which must be a
// CERTIFICATE, and parses it. Blocks after the first (a chain) are ignored.
// The error says what is wrong, without naming data: the caller wraps it.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM data found, want a CERTIFICATE block")
	}
	if block.Type != pemCertificate {
		return nil, fmt.Errorf("PEM block is %q, not a CERTIFICATE", block.Type)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return cert, nil
}

// LoadPool reads the PEM certificates at path (a CA bundle) into a pool,
// for tls.Config.RootCAs / ClientCAs; a file that holds none is an error.
func LoadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// encodeKeyPEM encodes key as SEC1 (ECDSA), PKCS#1 (RSA) or, for any other
// key type, PKCS#8.
func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, fmt.Errorf("marshal ECDSA key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: pemECKey, Bytes: der}), nil
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: pemRSAKey, Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	default:
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("marshal %T key: %w", key, err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: pemPKCS8Key, Bytes: der}), nil
	}
}

// parseKeyPEM finds the first private key block in data (skipping "EC
// PARAMETERS" as written by openssl ecparam) and parses it as PKCS#1, SEC1
// or PKCS#8. The parser the block's type names is tried first, then the
// others, so a mislabelled block still loads.
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no private key PEM block found")
		}
		switch block.Type {
		case pemECParams:
			continue
		case pemEncrypted:
			return nil, errors.New("encrypted private keys are not supported")
		case pemECKey, pemRSAKey, pemPKCS8Key:
			if _, ok := block.Headers["DEK-Info"]; ok {
				return nil, errors.New("encrypted private keys are not supported")
			}
			return parseKeyDER(block.Type, block.Bytes)
		default:
			return nil, fmt.Errorf("PEM block is %q, not a private key", block.Type)
		}
	}
}

func parseKeyDER(blockType string, der []byte) (crypto.Signer, error) {
	parsers := map[string]func([]byte) (any, error){
		pemRSAKey:   func(b []byte) (any, error) { return x509.ParsePKCS1PrivateKey(b) },
		pemECKey:    func(b []byte) (any, error) { return x509.ParseECPrivateKey(b) },
		pemPKCS8Key: x509.ParsePKCS8PrivateKey,
	}
	order := []string{blockType}
	for _, t := range []string{pemPKCS8Key, pemRSAKey, pemECKey} {
		if t != blockType {
			order = append(order, t)
		}
	}
	var firstErr error
	for _, t := range order {
		key, err := parsers[t](der)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%T keys cannot sign", key)
		}
		return signer, nil
	}
	return nil, fmt.Errorf("parse %s: %w", blockType, firstErr)
}

// writePair writes the key then the certificate, each atomically, wrapping
// errors with what (for example "CA" or "certificate") and the file name.
func writePair(certPath string, certPEM []byte, keyPath string, keyPEM []byte, what string) error {
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("write %s key %s: %w", what, keyPath, err)
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return fmt.Errorf("write %s certificate %s: %w", what, certPath, err)
	}
	return nil
}

// writeFileAtomic replaces path with data and mode perm so that readers see
// either the old file or the complete new one: it writes a temporary file in
// the same directory (its mode set before any byte is written), fsyncs it,
// renames it over path and fsyncs the directory. Missing parent directories
// are created with mode 0700.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if err != nil && !renamed {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	renamed = true
	return syncDir(dir)
}

// syncDir fsyncs a directory so a rename inside it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return d.Close()
}
