package workflows

import (
	"crypto/x509"
	"encoding/base64"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/certs"
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
