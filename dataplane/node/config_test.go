package node

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/errkind/errkindtest"
)

// validEnv is a complete, valid env for dir (with files for the certs).
func validEnv(t *testing.T, dir string) map[string]string {
	t.Helper()
	for _, f := range []string{"ca.crt", "peer.crt", "peer.key", "server.crt", "server.key", "api.crt", "api.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]string{
		nodeapi.KeyNodeName:                "demo-master-0",
		nodeapi.KeyNodeAddress:             "127.0.42.2",
		nodeapi.KeyInitialEtcdCluster:      "demo-master-0=https://127.0.42.2:2380,demo-master-1=https://127.0.42.3:2380",
		nodeapi.KeyEtcdInitialClusterState: "new",
		nodeapi.KeyEtcdCACert:              filepath.Join(dir, "ca.crt"),
		nodeapi.KeyEtcdPeerCert:            filepath.Join(dir, "peer.crt"),
		nodeapi.KeyEtcdPeerKey:             filepath.Join(dir, "peer.key"),
		nodeapi.KeyEtcdServerCert:          filepath.Join(dir, "server.crt"),
		nodeapi.KeyEtcdServerKey:           filepath.Join(dir, "server.key"),
		nodeapi.KeyAPIServerCert:           filepath.Join(dir, "api.crt"),
		nodeapi.KeyAPIServerKey:            filepath.Join(dir, "api.key"),
		nodeapi.KeyKubeVersion:             "v1.30.2",
		nodeapi.KeyDataDir:                 filepath.Join(dir, "disk"),
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := validEnv(t, dir)
	cases := []struct {
		name    string
		edit    func(env map[string]string)
		check   func(t *testing.T, c Config)
		wantErr string // substring; "" = valid
	}{
		{name: "defaults", edit: func(map[string]string) {}, check: func(t *testing.T, c Config) {
			if c.EtcdClientPort != 2379 || c.EtcdPeerPort != 2380 || c.APIServerPort != 6443 {
				t.Errorf("ports %d %d %d, want defaults", c.EtcdClientPort, c.EtcdPeerPort, c.APIServerPort)
			}
			if c.EtcdHeartbeat != 100*time.Millisecond || c.EtcdElection != time.Second || c.EtcdUnsafeNoFsync {
				t.Errorf("etcd timing %v %v fsync-off %v, want defaults", c.EtcdHeartbeat, c.EtcdElection, c.EtcdUnsafeNoFsync)
			}
			if !c.EtcdTLS() || c.EtcdClientURL() != "https://127.0.42.2:2379" || c.APIServerAddress() != "127.0.42.2:6443" {
				t.Errorf("urls %s %s", c.EtcdClientURL(), c.APIServerAddress())
			}
		}},
		{name: "plaintext etcd", edit: func(e map[string]string) {
			for _, k := range []string{nodeapi.KeyEtcdCACert, nodeapi.KeyEtcdPeerCert, nodeapi.KeyEtcdPeerKey, nodeapi.KeyEtcdServerCert, nodeapi.KeyEtcdServerKey} {
				delete(e, k)
			}
			e[nodeapi.KeyInitialEtcdCluster] = "demo-master-0=http://127.0.42.2:2380"
		}, check: func(t *testing.T, c Config) {
			if c.EtcdTLS() || c.EtcdPeerURL() != "http://127.0.42.2:2380" {
				t.Errorf("TLS %v peer %s, want plaintext", c.EtcdTLS(), c.EtcdPeerURL())
			}
		}},
		{name: "custom ports and timing", edit: func(e map[string]string) {
			e[nodeapi.KeyEtcdPeerPort] = "12380"
			e[nodeapi.KeyEtcdClientPort] = "12379"
			e[nodeapi.KeyAPIServerPort] = "16443"
			e[nodeapi.KeyEtcdHeartbeatMS] = "50"
			e[nodeapi.KeyEtcdElectionMS] = "500"
			e[nodeapi.KeyEtcdUnsafeNoFsync] = "true"
			e[nodeapi.KeyInitialEtcdCluster] = "demo-master-0=https://127.0.42.2:12380"
			e[nodeapi.KeyEtcdInitialClusterState] = "existing"
		}, check: func(t *testing.T, c Config) {
			if c.EtcdPeerPort != 12380 || c.EtcdHeartbeat != 50*time.Millisecond || !c.EtcdUnsafeNoFsync ||
				c.InitialClusterState != nodeapi.ClusterStateExisting {
				t.Errorf("config %+v", c)
			}
		}},
		{name: "unknown keys ignored", edit: func(e map[string]string) { e["ENABLE_NODE_PROBLEM_DETECTOR"] = "standalone" }},
		{name: "state defaults to new", edit: func(e map[string]string) { delete(e, nodeapi.KeyEtcdInitialClusterState) },
			check: func(t *testing.T, c Config) {
				if c.InitialClusterState != nodeapi.ClusterStateNew {
					t.Errorf("state %q", c.InitialClusterState)
				}
			}},
		{name: "no name", edit: func(e map[string]string) { delete(e, nodeapi.KeyNodeName) }, wantErr: "NODE_NAME is empty"},
		{name: "bad address", edit: func(e map[string]string) { e[nodeapi.KeyNodeAddress] = "localhost" }, wantErr: `NODE_ADDRESS="localhost": want a loopback IP`},
		{name: "non-loopback address", edit: func(e map[string]string) { e[nodeapi.KeyNodeAddress] = "10.0.0.2" }, wantErr: "NODE_ADDRESS=\"10.0.0.2\": want a loopback IP (127.0.0.0/8"},
		{name: "bad port", edit: func(e map[string]string) { e[nodeapi.KeyAPIServerPort] = "70000" }, wantErr: "APISERVER_PORT=\"70000\": want a TCP port 1-65535"},
		{name: "port clash", edit: func(e map[string]string) { e[nodeapi.KeyAPIServerPort] = "2379" }, wantErr: "must differ"},
		{name: "bad state", edit: func(e map[string]string) { e[nodeapi.KeyEtcdInitialClusterState] = "old" }, wantErr: `ETCD_INITIAL_CLUSTER_STATE="old": want "new" or "existing"`},
		{name: "partial tls", edit: func(e map[string]string) { delete(e, nodeapi.KeyEtcdPeerKey) }, wantErr: "ETCD_PEER_KEY empty while ETCD_CA_CERT, ETCD_PEER_CERT, ETCD_SERVER_CERT, ETCD_SERVER_KEY set"},
		{name: "missing cert file", edit: func(e map[string]string) { e[nodeapi.KeyEtcdCACert] = filepath.Join(dir, "nope.crt") }, wantErr: "ETCD_CA_CERT: stat"},
		{name: "no initial cluster", edit: func(e map[string]string) { delete(e, nodeapi.KeyInitialEtcdCluster) }, wantErr: "INITIAL_ETCD_CLUSTER is empty"},
		{name: "self missing from cluster", edit: func(e map[string]string) { e[nodeapi.KeyInitialEtcdCluster] = "other=https://127.0.42.3:2380" }, wantErr: "no entry for this member: want demo-master-0=https://127.0.42.2:2380"},
		{name: "self URL wrong", edit: func(e map[string]string) { e[nodeapi.KeyInitialEtcdCluster] = "demo-master-0=https://127.0.42.9:2380" }, wantErr: "want https://127.0.42.2:2380"},
		{name: "scheme mismatch", edit: func(e map[string]string) { e[nodeapi.KeyInitialEtcdCluster] = "demo-master-0=http://127.0.42.2:2380" }, wantErr: `scheme "http", want "https"`},
		{name: "malformed cluster entry", edit: func(e map[string]string) { e[nodeapi.KeyInitialEtcdCluster] = "demo-master-0" }, wantErr: "want name=https://ip:port"},
		{name: "no apiserver cert", edit: func(e map[string]string) { delete(e, nodeapi.KeyAPIServerCert) }, wantErr: "APISERVER_CERT is empty: the apiserver serves HTTPS only"},
		{name: "no version", edit: func(e map[string]string) { delete(e, nodeapi.KeyKubeVersion) }, wantErr: "KUBE_VERSION is empty"},
		{name: "bad version", edit: func(e map[string]string) { e[nodeapi.KeyKubeVersion] = "1.30" }, wantErr: `KUBE_VERSION="1.30": want a Kubernetes version such as v1.30.2`},
		{name: "no data dir", edit: func(e map[string]string) { delete(e, nodeapi.KeyDataDir) }, wantErr: "DATA_DIR is empty"},
		{name: "bad fsync flag", edit: func(e map[string]string) { e[nodeapi.KeyEtcdUnsafeNoFsync] = "yes please" }, wantErr: "ETCD_UNSAFE_NO_FSYNC"},
		{name: "election too short", edit: func(e map[string]string) { e[nodeapi.KeyEtcdElectionMS] = "200" }, wantErr: "at least 5 heartbeats"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := maps.Clone(base)
			tc.edit(env)
			c, err := ConfigFromEnv(env)
			if errkindtest.Want(t, err, tc.wantErr, errkind.InvalidArgument) {
				return
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestEnvFileRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := validEnv(t, dir)
	env[nodeapi.KeyAPIServerExtraArgs] = "--v=2 --feature-gates=A=true,B=false --audit-log-path='/tmp/it''s'"
	env[nodeapi.KeyEtcdUnsafeNoFsync] = "true"
	env[nodeapi.KeyAPIServerPort] = "16443"
	want, err := ConfigFromEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kube-env")
	if err := WriteEnvFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadEnvFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if _, err := LoadEnvFile(filepath.Join(dir, "missing")); !errors.Is(err, errkind.InvalidArgument) {
		t.Errorf("missing file: err %v, want InvalidArgument", err)
	}
}

func TestParseAPIServerArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		args    string
		check   func(o apiserverOptions) bool
		wantErr string
	}{
		{name: "empty", args: "", check: func(o apiserverOptions) bool {
			return o.MaxRequestsInflight == 400 && o.ShutdownDelay == 0 && o.Verbosity == 0
		}},
		{name: "all known", args: "--v=4 --feature-gates=Foo=true,Bar=false --max-requests-inflight=10 --audit-log-path=/tmp/a.log --shutdown-delay-duration=3s --enable-admission-plugins=NodeRestriction,PodSecurity",
			check: func(o apiserverOptions) bool {
				return o.Verbosity == 4 && o.FeatureGates["Foo"] && !o.FeatureGates["Bar"] && len(o.FeatureGates) == 2 &&
					o.MaxRequestsInflight == 10 && o.AuditLogPath == "/tmp/a.log" && o.ShutdownDelay == 3*time.Second &&
					len(o.AdmissionPlugins) == 2
			}},
		{name: "separate values", args: "--v 2 --shutdown-delay-duration 1s", check: func(o apiserverOptions) bool {
			return o.Verbosity == 2 && o.ShutdownDelay == time.Second
		}},
		{name: "unknown flag", args: "--no-such-flag", wantErr: "unknown flag: --no-such-flag"},
		{name: "unknown flag with value", args: "--v=2 --no-such-flag=1", wantErr: "unknown flag: --no-such-flag"},
		{name: "bad int", args: "--v=loud", wantErr: `invalid argument "loud" for "--v" flag`},
		{name: "bad duration", args: "--shutdown-delay-duration=soon", wantErr: `invalid argument "soon" for "--shutdown-delay-duration" flag`},
		{name: "bad feature gate", args: "--feature-gates=Foo", wantErr: "missing bool value for Foo"},
		{name: "unknown admission plugin", args: "--enable-admission-plugins=NoSuchPlugin", wantErr: `enable-admission-plugins plugin "NoSuchPlugin" is unknown`},
		{name: "negative inflight", args: "--max-requests-inflight=-1", wantErr: "can not be negative"},
		{name: "stray argument", args: "--v=1 extra", wantErr: "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseAPIServerArgs(tc.args)
			if errkindtest.Want(t, err, tc.wantErr, nil) {
				return
			}
			if !tc.check(o) {
				t.Errorf("options %+v", o)
			}
		})
	}
}

func TestVersionInfo(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, major, minor string }{
		{"v1.30.2", "1", "30"},
		{"v1.31.0-rc.1", "1", "31"},
		{"v1.29.10+hamaster", "1", "29"},
	}
	for _, tc := range cases {
		v := versionInfo(tc.in)
		if v.Major != tc.major || v.Minor != tc.minor || v.GitVersion != tc.in {
			t.Errorf("versionInfo(%q) = %+v", tc.in, v)
		}
	}
}
