package certs

import (
	"fmt"
	"os"
)

// LoadOrCreateServiceAccountKey makes sure path holds the PEM private key
// the cluster's apiservers sign and verify service-account tokens with: it
// creates one (type kt) when the file is missing and checks an existing
// one parses. One key per cluster, shared by every replica: a token issued
// by one apiserver must verify on the others. created reports a new key.
func LoadOrCreateServiceAccountKey(path string, kt KeyType) (created bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		if _, err := parseKeyPEM(b); err != nil {
			return false, fmt.Errorf("service-account key %s: %w", path, err)
		}
		return false, nil
	} else if !os.IsNotExist(err) {
		return false, fmt.Errorf("service-account key: %w", err)
	}
	key, err := generateKey(kt)
	if err != nil {
		return false, fmt.Errorf("service-account key: %w", err)
	}
	pemKey, err := encodeKeyPEM(key)
	if err != nil {
		return false, fmt.Errorf("service-account key: %w", err)
	}
	if err := writeFileAtomic(path, pemKey, 0o600); err != nil {
		return false, fmt.Errorf("write service-account key %s: %w", path, err)
	}
	return true, nil
}
