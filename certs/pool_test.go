package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadPool(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("pool-test", ECDSA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"a CA certificate", write("ca.crt", ca.CertPEM), ""},
		{"no PEM certificate", write("empty.crt", []byte("not a certificate\n")), "holds no PEM certificate"},
		{"no file", filepath.Join(dir, "missing.crt"), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, err := LoadPool(tc.path)
			if tc.wantErr == "" {
				if err != nil || !pool.Equal(ca.Pool()) {
					t.Fatalf("LoadPool = %v, %v; want the CA's pool", pool, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("LoadPool err = %v; want one saying %q", err, tc.wantErr)
			}
		})
	}
}
