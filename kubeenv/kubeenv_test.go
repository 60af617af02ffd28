package kubeenv_test

import (
	"crypto/x509"
	"maps"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

func TestParseRender(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want map[string]string
		err  string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "yaml-quote form", in: "A: 'x'\nB: 'it''s'\n", want: map[string]string{"A": "x", "B": "it's"}},
		{name: "unquoted int and comment", in: "# c\nETCD_RUNASUSER: 2006\nX: ''\n", want: map[string]string{"ETCD_RUNASUSER": "2006", "X": ""}},
		{name: "double quoted", in: `A: "a\nb"`, want: map[string]string{"A": "a\nb"}},
		{name: "null", in: "A:\n", want: map[string]string{"A": ""}},
		{name: "list value", in: "A: [1, 2]\n", err: "A is a YAML sequence"},
		{name: "bad key", in: "kube-env: 'x'\n", err: `key "kube-env" is not an environment variable name`},
		{name: "duplicate", in: "A: 'x'\nA: 'y'\n", err: "repeated"},
		{name: "not a mapping", in: "- a\n", err: "want a mapping"},
		{name: "old dialect", in: "A='x'\n", err: "want a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := kubeenv.Parse(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Parse(%q) err = %v, want %q", c.in, err, c.err)
				}
				return
			}
			if err != nil || !maps.Equal(got, c.want) {
				t.Fatalf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
			back, err := kubeenv.Parse(kubeenv.Render(got))
			if err != nil || !maps.Equal(back, got) {
				t.Fatalf("round trip of %v = %v, %v", got, back, err)
			}
		})
	}
	if got := kubeenv.Render(map[string]string{"B": "it's", "A": "1"}); got != "A: '1'\nB: 'it''s'\n" {
		t.Errorf("Render = %q, want kube-up's yaml-quote lines, sorted", got)
	}
}

func TestEtcdFlags(t *testing.T) {
	t.Parallel()
	hosts, err := kubeenv.Hosts(map[string]string{"INITIAL_ETCD_CLUSTER": "kubernetes-master,kubernetes-master-a1b"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	// The example of configure-helper.sh prepare-etcd-manifest's loop.
	want := "etcd-kubernetes-master=https://kubernetes-master:2380,etcd-kubernetes-master-a1b=https://kubernetes-master-a1b:2380"
	if got := kubeenv.InitialClusterFlag(kubeenv.EtcdMain, hosts); got != want {
		t.Errorf("main --initial-cluster = %s, want %s", got, want)
	}
	if got := kubeenv.InitialClusterFlag(kubeenv.EtcdEvents, hosts[:1]); got != "etcd-kubernetes-master=https://kubernetes-master:2381" {
		t.Errorf("events --initial-cluster = %s", got)
	}
	if h, _ := kubeenv.Hosts(map[string]string{}, "kubernetes-master"); len(h) != 1 || h[0] != "kubernetes-master" {
		t.Errorf("empty INITIAL_ETCD_CLUSTER = %v, want the master's own hostname", h)
	}
	for _, bad := range []string{"a,,b", "a,a", "https://x:2380", "A"} {
		if _, err := kubeenv.Hosts(map[string]string{"INITIAL_ETCD_CLUSTER": bad}, "x"); err == nil || !strings.Contains(err.Error(), "INITIAL_ETCD_CLUSTER") {
			t.Errorf("Hosts(%q) err = %v, want one naming INITIAL_ETCD_CLUSTER", bad, err)
		}
	}
	if kubeenv.HostOfMember("etcd-kubernetes-master") != "kubernetes-master" || kubeenv.HostOfMember("kubernetes-master") != "" {
		t.Error("HostOfMember")
	}
}

func TestReplicate(t *testing.T) {
	t.Parallel()
	for _, separate := range []bool{false, true} {
		fx, err := kubeuptest.NewMaster(kubeuptest.Options{Project: "p", Zone: "us-central1-b", StaticIP: "35.1.2.3", SeparateEtcdAPIServerCA: separate})
		if err != nil {
			t.Fatal(err)
		}
		src, err := fx.Parsed()
		if err != nil {
			t.Fatal(err)
		}
		if src.Env["ETCD_RUNASUSER"] != "2006" || src.Env["INITIAL_ETCD_CLUSTER"] != "kubernetes-master" {
			t.Fatalf("fixture parsed wrong: %q %q", src.Env["ETCD_RUNASUSER"], src.Env["INITIAL_ETCD_CLUSTER"])
		}
		before := src.Clone()
		got, err := kubeenv.Replicate(src, []string{"kubernetes-master", "kubernetes-master-0f3"}, "kubernetes-master-a1b")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(src.Env, before.Env) || !maps.Equal(src.Certs, before.Certs) {
			t.Fatal("Replicate changed its source")
		}
		if got.Env["INITIAL_ETCD_CLUSTER"] != "kubernetes-master,kubernetes-master-0f3,kubernetes-master-a1b" || got.Env["INITIAL_ETCD_CLUSTER_STATE"] != "existing" {
			t.Errorf("etcd keys: %q %q", got.Env["INITIAL_ETCD_CLUSTER"], got.Env["INITIAL_ETCD_CLUSTER_STATE"])
		}
		changedEnv := map[string]bool{"INITIAL_ETCD_CLUSTER": true, "INITIAL_ETCD_CLUSTER_STATE": true, "ETCD_PEER_CERT": true, "ETCD_PEER_KEY": true}
		for k, v := range src.Env {
			if !changedEnv[k] && got.Env[k] != v {
				t.Errorf("kube-env %s not copied verbatim", k)
			}
			if changedEnv[k] && k != "INITIAL_ETCD_CLUSTER" && got.Env[k] == v {
				t.Errorf("kube-env %s not regenerated", k)
			}
		}
		if len(got.Env) != len(src.Env)+1 {
			t.Errorf("kube-env has %d keys, want %d (source + INITIAL_ETCD_CLUSTER_STATE)", len(got.Env), len(src.Env)+1)
		}
		changedCerts := map[string]bool{"ETCD_APISERVER_SERVER_CERT": true, "ETCD_APISERVER_SERVER_KEY": true, "ETCD_APISERVER_CLIENT_CERT": true, "ETCD_APISERVER_CLIENT_KEY": true}
		for k, v := range src.Certs {
			if changedCerts[k] == (got.Certs[k] == v) {
				t.Errorf("kube-master-certs %s: regenerated=%v, want %v", k, got.Certs[k] != v, changedCerts[k])
			}
		}
		verify := func(item map[string]string, key string, ca *x509.CertPool, host string, usage x509.ExtKeyUsage) {
			t.Helper()
			pem, err := kubeenv.DecodeGzipBase64(key, item[key])
			if err != nil {
				t.Fatal(err)
			}
			c, err := certs.ParseCertPEM(pem)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: ca, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s: %v", key, err)
			}
		}
		verify(got.Env, "ETCD_PEER_CERT", fx.EtcdPeerCA.Pool(), "kubernetes-master-a1b", x509.ExtKeyUsageServerAuth)
		verify(got.Certs, "ETCD_APISERVER_SERVER_CERT", fx.EtcdClientCA.Pool(), "kubernetes-master-a1b", x509.ExtKeyUsageServerAuth)
		verify(got.Certs, "ETCD_APISERVER_CLIENT_CERT", fx.EtcdClientCA.Pool(), "", x509.ExtKeyUsageClientAuth)
		if separate {
			pem, _ := kubeenv.DecodeGzipBase64("ETCD_PEER_CERT", got.Env["ETCD_PEER_CERT"])
			c, _ := certs.ParseCertPEM(pem)
			if _, err := c.Verify(x509.VerifyOptions{Roots: fx.EtcdClientCA.Pool(), DNSName: "kubernetes-master-a1b"}); err == nil {
				t.Error("peer certificate signed by the etcd-apiserver CA, want ETCD_CA")
			}
		}
	}
}

func TestReplicateRefusesAMasterWithoutEtcdCA(t *testing.T) {
	t.Parallel()
	_, err := kubeenv.Replicate(kubeenv.Master{Env: map[string]string{"INITIAL_ETCD_CLUSTER": "m"}}, []string{"m"}, "m-a1b")
	if err == nil || !strings.Contains(err.Error(), "ETCD_CA_CERT") {
		t.Fatalf("err = %v, want one naming ETCD_CA_CERT", err)
	}
	if _, err := kubeenv.Replicate(kubeenv.Master{}, nil, "Bad_Name"); err == nil {
		t.Fatal("accepted a replica name that is not a hostname")
	}
}

func TestCertsItem(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{"KUBEAPISERVER_CERT": []byte("-----BEGIN CERTIFICATE-----\n...")}
	got, err := kubeenv.ParseCerts(kubeenv.RenderCerts(files))
	if err != nil || string(got["KUBEAPISERVER_CERT"]) != string(files["KUBEAPISERVER_CERT"]) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if _, err := kubeenv.ParseCerts("A: 'not base64!'\n"); err == nil || !strings.Contains(err.Error(), "A is not base64") {
		t.Fatalf("err = %v", err)
	}
	raw := []byte("pem")
	for _, enc := range []string{kubeenv.EncodeBase64(raw), kubeenv.EncodeGzipBase64(raw)} {
		if b, err := kubeenv.DecodeGzipBase64("K", enc); err != nil || string(b) != "pem" {
			t.Errorf("DecodeGzipBase64(%s) = %q, %v", enc, b, err)
		}
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{"etcd-peer.crt": []byte("a"), "ca.crt": []byte("b"), "apiserver.key": []byte("c")}
	text := kubeenv.RenderFiles(files)
	if !strings.Contains(text, "HAMASTER_FILE_ETCD_PEER__CRT: ") {
		t.Fatalf("RenderFiles = %s", text)
	}
	back, err := kubeenv.ParseFiles(text + "KUBEAPISERVER_CERT: 'eA=='\n")
	if err != nil || len(back) != 3 || string(back["etcd-peer.crt"]) != "a" {
		t.Fatalf("ParseFiles = %v, %v", back, err)
	}
}
