package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// kubeUpFixture is kube-up's master 0 metadata, its hostname changed to
// "localhost" so that it resolves without a VPC.
func kubeUpFixture(t *testing.T) (*kubeuptest.Master, kubeenv.Master) {
	t.Helper()
	km, err := kubeuptest.NewMaster(kubeuptest.Options{Project: "p", Zone: "us-central1-b", StaticIP: "198.18.0.10", SeparateEtcdAPIServerCA: true})
	if err != nil {
		t.Fatal(err)
	}
	md, err := km.Parsed()
	if err != nil {
		t.Fatal(err)
	}
	md.Env[kubeenv.InitialEtcdCluster] = "localhost"
	return km, md
}

func TestPrepareKubeUpWritesConfigureHelperFiles(t *testing.T) {
	t.Parallel()
	km, md := kubeUpFixture(t)
	disk := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := prepareKubeUp(ctx, KubeUpOptions{KubeEnv: kubeenv.Render(md.Env), MasterCerts: kubeenv.Render(md.Certs), Hostname: "localhost", Disk: disk})
	if err != nil {
		t.Fatal(err)
	}
	if m.host != "localhost" || m.hostIP != "127.0.0.1" || m.state != kubeenv.StateNew || !m.clientTLS {
		t.Errorf("host %q ip %q state %q clientTLS %v", m.host, m.hostIP, m.state, m.clientTLS)
	}
	srv := filepath.Join(disk, "srv", "kubernetes")
	files := []struct {
		path string
		want []byte
		mode os.FileMode
	}{
		{filepath.Join(srv, "etcd-ca.crt"), km.EtcdPeerCA.CertPEM, 0o644},
		{filepath.Join(srv, "pki", "etcd-apiserver-ca.crt"), km.EtcdClientCA.CertPEM, 0o644},
		{filepath.Join(srv, "pki", "apiserver.crt"), km.APIServerCert.CertPEM, 0o644},
		{filepath.Join(srv, "pki", "apiserver.key"), km.APIServerCert.KeyPEM, 0o600},
		{filepath.Join(srv, "pki", "ca.crt"), km.ClusterCA.CertPEM, 0o644},
		{filepath.Join(srv, "etcd-peer.key"), nil, 0o600},
		{filepath.Join(srv, "pki", "etcd-apiserver-client.key"), nil, 0o600},
		{filepath.Join(srv, "pki", "etcd-apiserver-server.key"), nil, 0o600},
		{filepath.Join(srv, "pki", "etcd-apiserver-ca.key"), nil, 0o600},
	}
	for _, f := range files {
		st, err := os.Stat(f.path)
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, st.Mode().Perm(), f.mode)
		}
		b, _ := os.ReadFile(f.path)
		if f.want != nil && !bytes.Equal(b, f.want) {
			t.Errorf("%s: not the decoded metadata value", f.path)
		}
		if !bytes.HasPrefix(b, []byte("-----BEGIN ")) {
			t.Errorf("%s: not PEM", f.path)
		}
	}

	for _, tc := range []struct {
		c                                kubeenv.EtcdCluster
		dir, listenPeer, advPeer, client string
		initialCluster                   string
		clientTLS                        bool
	}{
		{kubeenv.EtcdMain, "data", "https://127.0.0.1:2380", "https://localhost:2380", "https://127.0.0.1:2379", "etcd-localhost=https://localhost:2380", true},
		{kubeenv.EtcdEvents, "data-events", "https://127.0.0.1:2381", "https://localhost:2381", "http://127.0.0.1:4002", "etcd-localhost=https://localhost:2381", false},
	} {
		ec, err := m.embedConfig(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{ec.Name, ec.Dir, ec.ListenPeerUrls[0].String(), ec.AdvertisePeerUrls[0].String(),
			ec.ListenClientUrls[0].String(), ec.AdvertiseClientUrls[0].String(), ec.InitialCluster, ec.ClusterState}
		want := []string{"etcd-localhost", filepath.Join(disk, "var", "etcd", tc.dir), tc.listenPeer, tc.advPeer, tc.client, tc.client, tc.initialCluster, "new"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got\n%q\nwant\n%q", tc.c.Name, got, want)
		}
		if !ec.PeerTLSInfo.ClientCertAuth || ec.PeerTLSInfo.TrustedCAFile != filepath.Join(srv, "etcd-ca.crt") {
			t.Errorf("%s: peer TLS %+v", tc.c.Name, ec.PeerTLSInfo)
		}
		if ec.ClientTLSInfo.ClientCertAuth != tc.clientTLS || (tc.clientTLS && ec.ClientTLSInfo.TrustedCAFile != filepath.Join(srv, "pki", "etcd-apiserver-ca.crt")) {
			t.Errorf("%s: client TLS %+v", tc.c.Name, ec.ClientTLSInfo)
		}
		if ec.QuotaBackendBytes != defaultQuotaBackendBytes {
			t.Errorf("%s: quota %d", tc.c.Name, ec.QuotaBackendBytes)
		}
	}
}

// A kube-env a real master could not boot from fails at once, naming the
// key.
func TestPrepareKubeUpRefusesBadMetadata(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(md kubeenv.Master)
		want   string
	}{
		{"cluster without this host", func(md kubeenv.Master) {
			md.Env[kubeenv.InitialEtcdCluster] = "kubernetes-master,kubernetes-master-a1b"
		},
			`INITIAL_ETCD_CLUSTER="kubernetes-master,kubernetes-master-a1b" does not list this master's hostname "localhost"`},
		{"cluster not hostnames", func(md kubeenv.Master) { md.Env[kubeenv.InitialEtcdCluster] = "localhost,https://x:2380" }, "INITIAL_ETCD_CLUSTER"},
		{"no etcd CA", func(md kubeenv.Master) { delete(md.Env, kubeenv.EtcdCACert) }, "kube-env has no ETCD_CA_CERT"},
		{"no peer key", func(md kubeenv.Master) { md.Env[kubeenv.EtcdPeerKey] = "" }, "ETCD_PEER_KEY"},
		{"bad state", func(md kubeenv.Master) { md.Env[kubeenv.InitialEtcdClusterState] = "joining" }, `INITIAL_ETCD_CLUSTER_STATE="joining"`},
		{"some apiserver etcd keys", func(md kubeenv.Master) { delete(md.Certs, kubeenv.EtcdAPIServerClientKey) }, "kube-master-certs has no ETCD_APISERVER_CLIENT_KEY"},
		{"no master cert", func(md kubeenv.Master) { delete(md.Env, kubeenv.MasterCert) }, "kube-env has no MASTER_CERT"},
		{"peer key not matching", func(md kubeenv.Master) { md.Env[kubeenv.EtcdPeerKey] = md.Env[kubeenv.MasterKey] }, "ETCD_PEER_CERT/ETCD_PEER_KEY"},
		{"not base64", func(md kubeenv.Master) { md.Env[kubeenv.EtcdCACert] = "%%%" }, "ETCD_CA_CERT is not base64"},
		{"external etcd", func(md kubeenv.Master) { md.Env["ETCD_SERVERS"] = "https://10.0.0.5:2379" }, "ETCD_SERVERS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, md := kubeUpFixture(t)
			tc.change(md)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := prepareKubeUp(ctx, KubeUpOptions{KubeEnv: kubeenv.Render(md.Env), MasterCerts: kubeenv.Render(md.Certs), Hostname: "localhost", Disk: t.TempDir()})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errkind.InvalidArgument) {
				t.Fatalf("err = %v; want an invalid-argument error containing %q", err, tc.want)
			}
		})
	}
}

// Without any ETCD_APISERVER_* key, main etcd serves plain http as
// prepare-etcd-manifest does.
func TestPrepareKubeUpPlainClientWithoutAPIServerCerts(t *testing.T) {
	t.Parallel()
	_, md := kubeUpFixture(t)
	for k := range md.Certs {
		if strings.HasPrefix(k, "ETCD_APISERVER_") {
			delete(md.Certs, k)
		}
	}
	m, err := prepareKubeUp(context.Background(), KubeUpOptions{KubeEnv: kubeenv.Render(md.Env), MasterCerts: kubeenv.Render(md.Certs), Hostname: "localhost", Disk: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.clientURL(kubeenv.EtcdMain, "127.0.0.1"); got != "http://127.0.0.1:2379" {
		t.Errorf("main client URL %s", got)
	}
}
