package lbproxy

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/certs"
)

// TestHealthServerName: targets whose certificate names the cluster, not
// their own address (a kube-up master's MASTER_CERT), are healthy only
// when the checks verify them for that name.
func TestHealthServerName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, serverName string
		healthy          bool
		lastError        string
	}{
		{"target IP", "", false, "127.0.0.1"},
		{"named", "kubernetes", true, ""},
		{"wrong name", "etcd", false, "etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pki := newTestPKI(t)
			ca, err := certs.LoadCA(pki.CAFile, filepath.Join(pki.Dir, "ca.key"))
			if err != nil {
				t.Fatal(err)
			}
			// The name "kubernetes" and a static IP, not 127.0.0.1.
			pair, err := ca.IssueEtcdServer(certs.Request{CommonName: "kubernetes", DNSNames: []string{"kubernetes"}, IPs: []net.IP{net.ParseIP("198.51.100.1")}})
			if err != nil {
				t.Fatal(err)
			}
			if pki.Cert, err = pair.TLSCertificate(); err != nil {
				t.Fatal(err)
			}
			b := newBackend(t, pki, "m", true)
			cfg, path := testConfig(t, pki, func(c *Config) { c.Health.ServerName = tc.serverName }, b)
			startLB(t, cfg, path)
			// The round that decides: healthy, or the error the case is
			// about (a check that timed out on a busy machine is neither).
			st := waitStatus(t, cfg.StatusFile, "a deciding check round", func(st Status) bool {
				return len(st.Targets) == 1 && (st.Targets[0].Healthy || tc.lastError != "" && strings.Contains(st.Targets[0].LastError, tc.lastError))
			})
			got := st.Targets[0]
			if got.Healthy != tc.healthy || !strings.Contains(got.LastError, tc.lastError) {
				t.Errorf("healthy %v (last error %q), want %v with %q", got.Healthy, got.LastError, tc.healthy, tc.lastError)
			}
		})
	}
}
