package hamaster

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

func TestIssueReplicaCertificates(t *testing.T) {
	t.Parallel()
	ca, err := certs.NewCA("test-ca", certs.ECDSA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("other-ca", certs.ECDSA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issuer := flavors.CapabilitiesOf(&Flavor{}).ReplicaCertIssuer
	if issuer == nil {
		t.Fatal("the hamaster flavor is no flavors.ReplicaCertIssuer")
	}
	files := []string{
		providers.FileCACert, providers.FileEtcdPeerCert, providers.FileEtcdPeerKey, providers.FileEtcdServerCert,
		providers.FileEtcdServerKey, providers.FileAPIServerCert, providers.FileAPIServerKey,
	}
	tests := []struct {
		name, replica, address string
		sans                   certs.APIServerSANs
		// apiserver: hosts the serving certificate must verify for;
		// notAPIServer: hosts it must not.
		apiserver, notAPIServer []string
		wantErr                 string
	}{
		{
			name: "default service range", replica: "demo-master", address: "127.0.42.2",
			sans:         certs.APIServerSANs{StaticIP: "127.0.42.1"},
			apiserver:    []string{"127.0.42.2", "demo-master", "127.0.42.1", "10.0.0.1", "kubernetes", "kubernetes.default.svc.cluster.local"},
			notAPIServer: []string{"127.0.42.3", "demo-master-1"},
		},
		{
			name: "the cluster's service range", replica: "demo-master-1", address: "10.1.0.5",
			sans:         certs.APIServerSANs{StaticIP: "203.0.113.7", ServiceCIDR: "10.96.0.0/12"},
			apiserver:    []string{"10.1.0.5", "demo-master-1", "203.0.113.7", "10.96.0.1"},
			notAPIServer: []string{"10.0.0.1"},
		},
		{
			name: "DNS names and the other replicas kept", replica: "demo-master-2", address: "10.1.0.6",
			sans:      certs.APIServerSANs{StaticIP: "203.0.113.7", DNSNames: []string{"api.example.com"}, ReplicaIPs: []string{"10.1.0.5"}, ReplicaNames: []string{"demo-master-1"}},
			apiserver: []string{"10.1.0.6", "demo-master-2", "10.1.0.5", "demo-master-1", "api.example.com", "10.0.0.1"},
		},
		{
			name: "an address that is no IP", replica: "demo-master-3", address: "host.example.com",
			wantErr: `replica demo-master-3: address "host.example.com" is not an IP`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			shared := tt.sans
			shared.ReplicaIPs = slices.Clone(tt.sans.ReplicaIPs)
			shared.ReplicaNames = slices.Clone(tt.sans.ReplicaNames)
			got, err := issuer.IssueReplicaCertificates(ca, tt.replica, tt.address, shared)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(shared.ReplicaIPs, tt.sans.ReplicaIPs) || !slices.Equal(shared.ReplicaNames, tt.sans.ReplicaNames) {
				t.Errorf("the caller's SANs changed: %+v; want %+v", shared, tt.sans)
			}
			if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, slices.Sorted(slices.Values(files))) {
				t.Fatalf("files %v; want %v", names, slices.Sorted(slices.Values(files)))
			}
			if string(got[providers.FileCACert]) != string(ca.CertPEM) {
				t.Error("ca.crt is not the CA's certificate")
			}
			verify := func(file string, usage x509.ExtKeyUsage, host string) error {
				c, err := certs.ParseCertPEM(got[file])
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				_, err = c.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
				return err
			}
			for _, h := range tt.apiserver {
				if err := verify(providers.FileAPIServerCert, x509.ExtKeyUsageServerAuth, h); err != nil {
					t.Errorf("apiserver certificate for %s: %v", h, err)
				}
			}
			for _, h := range tt.notAPIServer {
				if err := verify(providers.FileAPIServerCert, x509.ExtKeyUsageServerAuth, h); err == nil {
					t.Errorf("apiserver certificate verifies for %s; want it not to", h)
				}
			}
			for _, f := range []string{providers.FileEtcdPeerCert, providers.FileEtcdServerCert} {
				for _, h := range []string{tt.replica, tt.address, "localhost", "127.0.0.1"} {
					for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
						if err := verify(f, u, h); err != nil {
							t.Errorf("%s for %s (usage %v): %v", f, h, u, err)
						}
					}
				}
			}
			for cert, key := range map[string]string{
				providers.FileEtcdPeerCert: providers.FileEtcdPeerKey, providers.FileEtcdServerCert: providers.FileEtcdServerKey, providers.FileAPIServerCert: providers.FileAPIServerKey,
			} {
				if _, err := tls.X509KeyPair(got[cert], got[key]); err != nil {
					t.Errorf("%s and %s: %v", cert, key, err)
				}
				c, _ := certs.ParseCertPEM(got[cert])
				if _, err := c.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
					t.Errorf("%s verifies with another CA", cert)
				}
			}
		})
	}
}
