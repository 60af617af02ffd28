package kubeup

import (
	"context"
	"crypto/x509"
	"maps"
	"net"
	"testing"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/providers"
)

// machineType stands for a provider's machine setting, copied verbatim.
const machineType = "machine-type"

// gceLike is the infrastructure a GCE master has for this flavor: its
// hostname is its name. The tests on a provider's test bed
// (flavors/kubeup's gce_test.go and aws_test.go) reach real masters.
type gceLike struct{ providers.Provider }

func (gceLike) Name() string                             { return "gce-like" }
func (gceLike) MachineHostname(replica, _ string) string { return replica }
func (gceLike) DialMachine(context.Context, string, string) (net.Conn, error) {
	return nil, net.ErrClosed
}

// (Moved from providers/gce/membership_test.go, assertions unchanged.)
// CloneTemplate is replicate-master-instance: hostnames from the members,
// the new master's own etcd certificates, everything else verbatim, and
// the source untouched; a master kube-up did not build is refused.
func TestCloneTemplateFollowsReplicateMasterInstance(t *testing.T) {
	t.Parallel()
	m, err := kubeuptest.NewMaster(kubeuptest.Options{Project: "p", Zone: "us-central1-b", StaticIP: "198.18.0.10"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := kubeenv.Parse(m.KubeEnv)
	if err != nil {
		t.Fatal(err)
	}
	files, err := kubeenv.ParseCerts(m.MasterCerts) // as the gce provider keeps kube-master-certs
	if err != nil {
		t.Fatal(err)
	}
	src := providers.Template{Version: "v1.33.1", Env: env, Files: files, Machine: map[string]string{machineType: "n1-standard-4"}}
	orig := src.Clone()
	p := &Flavor{p: gceLike{}, dial: gceLike{}}
	members := map[string][]etcdmember.Member{providers.EtcdMain: {
		{ID: 1, Name: "etcd-kubernetes-master", PeerURLs: []string{"https://kubernetes-master:2380"}},
		{ID: 2, PeerURLs: []string{"https://kubernetes-master-a1b:2380"}, Learner: true}, // the new one, not started
	}}
	hamasterFiles := map[string][]byte{providers.FileAPIServerCert: []byte("not used")}
	got, err := p.CloneTemplate(context.Background(), src, "kubernetes-master-a1b", "10.128.0.3", members, hamasterFiles)
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Env[kubeenv.InitialEtcdCluster]; v != "kubernetes-master,kubernetes-master-a1b" {
		t.Errorf("INITIAL_ETCD_CLUSTER = %q", v)
	}
	if v := got.Env[kubeenv.InitialEtcdClusterState]; v != "existing" {
		t.Errorf("INITIAL_ETCD_CLUSTER_STATE = %q", v)
	}
	if _, ok := got.Files[providers.FileAPIServerCert]; ok {
		t.Error("hamaster's apiserver certificate was put on a kube-up master")
	}
	if got.Version != src.Version || got.Machine[machineType] != "n1-standard-4" {
		t.Errorf("version/machine not copied: %q %v", got.Version, got.Machine)
	}
	regenerated := map[string]bool{kubeenv.InitialEtcdCluster: true, kubeenv.InitialEtcdClusterState: true, kubeenv.EtcdPeerCert: true, kubeenv.EtcdPeerKey: true}
	for k, v := range src.Env {
		if !regenerated[k] && got.Env[k] != v {
			t.Errorf("kube-env %s changed", k)
		}
	}
	if got.Env[kubeenv.EtcdPeerCert] == src.Env[kubeenv.EtcdPeerCert] {
		t.Error("the replica kept master 0's etcd peer certificate")
	}
	peer, err := kubeenv.DecodeGzipBase64(kubeenv.EtcdPeerCert, got.Env[kubeenv.EtcdPeerCert])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certs.ParseCertPEM(peer)
	if err != nil {
		t.Fatalf("peer certificate: %v", err)
	}
	if err := cert.VerifyHostname("kubernetes-master-a1b"); err != nil {
		t.Errorf("peer certificate: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: m.EtcdPeerCA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("peer certificate not signed by ETCD_CA_CERT: %v", err)
	}
	for _, k := range []string{kubeenv.EtcdAPIServerClientCert, kubeenv.EtcdAPIServerServerCert} {
		if string(got.Files[k]) == string(src.Files[k]) {
			t.Errorf("%s not regenerated", k)
		}
	}
	if string(got.Files[kubeenv.KubeAPIServerCert]) != string(src.Files[kubeenv.KubeAPIServerCert]) {
		t.Error("KUBEAPISERVER_CERT not copied verbatim")
	}
	if !maps.Equal(src.Env, orig.Env) || len(src.Files) != len(orig.Files) {
		t.Error("the source template was modified")
	}

	// Members not named etcd-<hostname>: not kube-up's masters.
	bad := map[string][]etcdmember.Member{providers.EtcdMain: {{ID: 1, Name: "master0", PeerURLs: []string{"https://10.0.0.2:2380"}}}}
	if _, err := p.CloneTemplate(context.Background(), src, "kubernetes-master-a1b", "", bad, nil); err == nil {
		t.Error("members named by hamaster's convention were accepted")
	}
	// A template without kube-up's etcd CA: refused, naming the key.
	delete(src.Env, kubeenv.EtcdCACert)
	if _, err := p.CloneTemplate(context.Background(), src, "kubernetes-master-a1b", "", members, nil); err == nil {
		t.Error("a master without ETCD_CA_CERT was cloned")
	}
}
