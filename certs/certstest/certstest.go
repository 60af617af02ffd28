// Package certstest is what tests need of package certs: a CA written to
// disk where the code under test reads it.
package certstest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
)

// WriteCA makes a CA named name (an ECDSA key, valid for validity, 0 for
// certs' default), writes it under dir as ca.crt and ca.key, and returns
// it and the path of ca.crt. It fails the test on any error.
func WriteCA(t testing.TB, dir, name string, validity time.Duration) (*certs.CA, string) {
	t.Helper()
	ca, err := certs.NewCA(name, certs.ECDSA, validity)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(dir, "ca.crt")
	if err := ca.Write(certFile, filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	return ca, certFile
}
