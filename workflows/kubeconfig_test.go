package workflows

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/certs/certstest"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
)

// TestRenderKubeconfig: the kubeconfig names the endpoint, trusts the
// cluster CA and carries a client certificate that the CA signed for the
// user and groups, in the shape kubectl reads.
func TestRenderKubeconfig(t *testing.T) {
	t.Parallel()
	ca, err := certs.NewCA("test-ca", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueClient("hamaster-admin", []string{"system:masters"}, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderKubeconfig("demo", "https://127.0.65.1:6443", "hamaster-admin", ca.CertPEM, pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(out, &kc); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, out)
	}
	if kc.APIVersion != "v1" || kc.Kind != "Config" || len(kc.Clusters) != 1 || len(kc.Users) != 1 || len(kc.Contexts) != 1 {
		t.Fatalf("shape: %+v", kc)
	}
	ctx := kc.Contexts[0]
	if kc.CurrentContext != ctx.Name || ctx.Context.Cluster != kc.Clusters[0].Name || ctx.Context.User != kc.Users[0].Name {
		t.Errorf("current context %q does not tie the cluster and user together: %+v", kc.CurrentContext, kc)
	}
	if got := kc.Clusters[0].Cluster.Server; got != "https://127.0.65.1:6443" {
		t.Errorf("server %q", got)
	}
	decode := func(what, b64 string) []byte {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return b
	}
	if string(decode("CA", kc.Clusters[0].Cluster.CertificateAuthorityData)) != string(ca.CertPEM) {
		t.Error("certificate-authority-data is not the cluster CA")
	}
	cert, err := certs.ParseCertPEM(decode("client cert", kc.Users[0].User.ClientCertificateData))
	if err != nil {
		t.Fatalf("client-certificate-data: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate not valid for client auth under the cluster CA: %v", err)
	}
	if cert.Subject.CommonName != "hamaster-admin" || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject %v, want CN=hamaster-admin O=system:masters", cert.Subject)
	}
	if string(decode("client key", kc.Users[0].User.ClientKeyData)) != string(pair.KeyPEM) {
		t.Error("client-key-data is not the certificate's key")
	}
}

// ownCAFlavor is hamaster's own masters: the CA is in the state
// directory (a flavors.ReplicaCertIssuer).
type ownCAFlavor struct{ flavors.Flavor }

func (ownCAFlavor) Name() string { return "hamaster" }
func (ownCAFlavor) IssueReplicaCertificates(*certs.CA, string, string, certs.APIServerSANs) (map[string][]byte, error) {
	return nil, errors.New("ownCAFlavor issues no replica certificates")
}

// carryingFlavor's masters carry their own CA (no ReplicaCertIssuer)
// and no ClientIssuer.
type carryingFlavor struct{ flavors.Flavor }

func (carryingFlavor) Name() string { return "kubeup" }

// issuingFlavor issues on its "master-1" with ca, recording the request.
type issuingFlavor struct {
	carryingFlavor
	ca  *certs.CA
	err error
	got []flavors.ClientRequest
}

func (f *issuingFlavor) Name() string { return "kubeadm" }
func (f *issuingFlavor) IssueClient(_ context.Context, req flavors.ClientRequest) (flavors.ClientCredentials, error) {
	f.got = append(f.got, req)
	if f.err != nil {
		return flavors.ClientCredentials{}, f.err
	}
	groups := req.Groups
	if groups == nil {
		groups = []string{"kubeadm:cluster-admins"}
	}
	pair, err := f.ca.IssueClientFor(req.User, groups, certs.ECDSA, req.Validity)
	if err != nil {
		return flavors.ClientCredentials{}, err
	}
	return flavors.ClientCredentials{CACertPEM: f.ca.CertPEM, CertPEM: pair.CertPEM, KeyPEM: pair.KeyPEM, Groups: groups, Server: "https://198.18.1.100:8443", Master: "master-1"}, nil
}

// TestKubeconfigByFlavor: hamaster's own masters get a certificate from
// the state directory's CA (system:masters unless asked, the static IP's
// endpoint); masters that carry their own CA get theirs from the
// flavor's ClientIssuer (its groups and server unless asked), or a clear
// refusal when the flavor has none; the validity is bounded.
func TestKubeconfigByFlavor(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	own, _ := certstest.WriteCA(t, PKIDir(state, "c"), "hamaster", 0)
	masters, err := certs.NewCA("kubernetes", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	year := MaxClientValidity
	for _, tc := range []struct {
		name     string
		flavor   flavors.Flavor
		p        KubeconfigParams
		ca       *certs.CA
		server   string
		groups   []string
		validity time.Duration
		issuedOn string
		wantErr  string
		kind     error
	}{
		{name: "hamaster: as before", flavor: ownCAFlavor{}, p: KubeconfigParams{User: "hamaster-admin"},
			ca: own, server: "https://198.18.1.100:8443", groups: []string{"system:masters"}, validity: year},
		{name: "hamaster: groups, validity, server asked for", flavor: ownCAFlavor{}, p: KubeconfigParams{User: "alice", Groups: []string{"dev", "qa"}, Validity: time.Hour, Server: "https://api.example.com:443"},
			ca: own, server: "https://api.example.com:443", groups: []string{"dev", "qa"}, validity: time.Hour},
		{name: "kubeadm: the flavor's", flavor: &issuingFlavor{ca: masters}, p: KubeconfigParams{User: "hamaster-admin"},
			ca: masters, server: "https://198.18.1.100:8443", groups: []string{"kubeadm:cluster-admins"}, validity: year, issuedOn: "master-1"},
		{name: "kubeadm: asked for", flavor: &issuingFlavor{ca: masters}, p: KubeconfigParams{User: "alice", Groups: []string{"dev"}, Validity: 2 * time.Hour, Server: "https://10.0.0.1:6443"},
			ca: masters, server: "https://10.0.0.1:6443", groups: []string{"dev"}, validity: 2 * time.Hour, issuedOn: "master-1"},
		{name: "kubeadm: the flavor fails", flavor: &issuingFlavor{ca: masters, err: errkind.Errorf(errkind.Unavailable, "no master is running")}, p: KubeconfigParams{User: "hamaster-admin"},
			wantErr: "issue a client certificate for hamaster-admin from the masters' CA (the kubeadm flavor): no master is running", kind: errkind.Unavailable},
		{name: "a carrying flavor without an issuer", flavor: carryingFlavor{}, p: KubeconfigParams{User: "hamaster-admin"},
			wantErr: "the kubeup flavor's masters carry their own CA", kind: errkind.FailedPrecondition},
		{name: "more than a year", flavor: ownCAFlavor{}, p: KubeconfigParams{User: "hamaster-admin", Validity: year + time.Hour},
			wantErr: "--validity", kind: errkind.InvalidArgument},
		{name: "no user", flavor: &issuingFlavor{ca: masters}, p: KubeconfigParams{},
			wantErr: "--user", kind: errkind.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &Deps{Cluster: "c", StateDir: state, Provider: &vipProvider{}, Master: tc.flavor}
			start := time.Now()
			got, err := Kubeconfig(t.Context(), d, tc.p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, tc.kind) {
					t.Fatalf("err = %v; want %v naming %q", err, tc.kind, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f, ok := tc.flavor.(*issuingFlavor); ok && (len(f.got) != 1 || !slices.Equal(f.got[0].Groups, tc.p.Groups) || f.got[0].Validity != tc.validity) {
				t.Errorf("asked the flavor for %+v", f.got)
			}
			var kc kubeconfig
			if err := yaml.Unmarshal(got.Doc, &kc); err != nil {
				t.Fatal(err)
			}
			if s := kc.Clusters[0].Cluster.Server; s != tc.server || got.Server != tc.server {
				t.Errorf("server %q (reported %q); want %q", s, got.Server, tc.server)
			}
			ca, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CertificateAuthorityData)
			if string(ca) != string(tc.ca.CertPEM) {
				t.Error("the kubeconfig does not trust the CA that signed the certificate")
			}
			raw, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.ClientCertificateData)
			cert, err := certs.ParseCertPEM(raw)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: tc.ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Error(err)
			}
			if cert.Subject.CommonName != tc.p.User || !slices.Equal(slices.Sorted(slices.Values(cert.Subject.Organization)), tc.groups) || !slices.Equal(got.Groups, tc.groups) {
				t.Errorf("subject %v (reported groups %v); want CN=%s O=%v", cert.Subject, got.Groups, tc.p.User, tc.groups)
			}
			if d := cert.NotAfter.Sub(start); d < tc.validity-time.Minute || d > tc.validity+time.Minute || !got.NotAfter.Equal(cert.NotAfter) {
				t.Errorf("valid for %v (reported until %s); want %v", d, got.NotAfter, tc.validity)
			}
			if got.IssuedOn != tc.issuedOn || got.User != tc.p.User {
				t.Errorf("issued on %q for %q; want %q, %q", got.IssuedOn, got.User, tc.issuedOn, tc.p.User)
			}
		})
	}
}
