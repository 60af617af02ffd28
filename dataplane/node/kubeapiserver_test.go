package node

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/loopbacktest"
)

// installFakeAPIServer writes script as dir/version/kube-apiserver with a
// matching SHA256SUMS (or a wrong one).
func installFakeAPIServer(t *testing.T, dir, version, script string, goodSum bool) {
	t.Helper()
	bin := nodeapi.KubeAPIServerPath(dir, version)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(script))
	hexSum := hex.EncodeToString(sum[:])
	if !goodSum {
		hexSum = strings.Repeat("0", 64)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), KubeAPIServerChecksums), []byte(hexSum+"  kube-apiserver\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKubeAPIServerBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	installFakeAPIServer(t, dir, "v1.33.13", "#!/bin/sh\n", true)
	installFakeAPIServer(t, dir, "v1.34.4", "#!/bin/sh\n", false)
	cases := []struct {
		version, wantErr string
	}{
		{"v1.33.13", ""},
		{"v1.34.4", "sha256"},
		{"v1.35.0", "KUBE_VERSION=v1.35.0: no kube-apiserver binary"},
	}
	for _, tc := range cases {
		bin, err := kubeAPIServerBinary(dir, tc.version)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.version, err)
		case tc.wantErr == "" && bin != nodeapi.KubeAPIServerPath(dir, tc.version):
			t.Errorf("%s: binary %s", tc.version, bin)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: err %v, want it to contain %q", tc.version, err, tc.wantErr)
		}
	}
}

func TestKubeAPIServerArgs(t *testing.T) {
	t.Parallel()
	c := Config{
		Address: "127.0.9.3", APIServerPort: 6443, EtcdClientPort: 2379,
		EtcdCACert: "/p/ca.crt", EtcdPeerCert: "/p/peer.crt", EtcdPeerKey: "/p/peer.key",
		APIServerCert: "/p/api.crt", APIServerKey: "/p/api.key",
		ServiceAccountKeyFile: "/p/sa.key", DataDir: "/d",
		APIServerExtraArgs: "--v=2  --shutdown-delay-duration=5s",
	}
	args := kubeAPIServerArgs(c)
	for _, want := range []string{
		"--advertise-address=127.0.9.3", "--bind-address=127.0.9.3", "--secure-port=6443",
		"--etcd-servers=https://127.0.9.3:2379", "--etcd-cafile=/p/ca.crt", "--etcd-certfile=/p/peer.crt", "--etcd-keyfile=/p/peer.key",
		"--tls-cert-file=/p/api.crt", "--tls-private-key-file=/p/api.key", "--client-ca-file=/p/ca.crt",
		"--service-account-key-file=/p/sa.key", "--service-account-signing-key-file=/p/sa.key",
		"--service-cluster-ip-range=" + nodeapi.DefaultServiceClusterIPRange,
		"--endpoint-reconciler-type=lease", "--authorization-mode=RBAC",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %s: %v", want, args)
		}
	}
	// The extra args come last: a repeated flag takes its last value.
	if n := len(args); args[n-2] != "--v=2" || args[n-1] != "--shutdown-delay-duration=5s" {
		t.Errorf("extra args not last: %v", args[n-2:])
	}
	if i := slices.Index(args, "--shutdown-delay-duration="+DefaultShutdownDelay.String()); i < 0 || i > len(args)-3 {
		t.Errorf("default shutdown delay missing or after the extra args: %v", args)
	}
	c.ClientCAFile, c.ServiceClusterIPRange = "/p/client-ca.crt", "10.96.0.0/12"
	args = kubeAPIServerArgs(c)
	for _, want := range []string{"--client-ca-file=/p/client-ca.crt", "--service-cluster-ip-range=10.96.0.0/12"} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %s: %v", want, args)
		}
	}
}

func TestExitReason(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, out, want string
	}{
		{"flag error before usage", "Error: unknown flag: --no-such-flag\nUsage:\n  kube-apiserver [flags]\n\n      --foo int   bar\n", "Error: unknown flag: --no-such-flag"},
		{"klog fatal", "I1123 22:00:00.000000   1 server.go:1] starting\nF1123 22:00:01.000000   1 server.go:2] storage: boom\n", "F1123 22:00:01.000000   1 server.go:2] storage: boom"},
		{"first klog error", "E1123 22:00:00.000000   1 a.go:1] first\nE1123 22:00:00.000000   1 a.go:2] second\n", "E1123 22:00:00.000000   1 a.go:1] first"},
		{"last line, no newline", "I1123 starting\nsignal: killed", "signal: killed"},
		{"nothing", "", "(no output)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e exitReason
			// Written in small pieces, as a pipe delivers them.
			for s := tc.out; s != ""; {
				n := min(7, len(s))
				if _, err := e.Write([]byte(s[:n])); err != nil {
					t.Fatal(err)
				}
				s = s[n:]
			}
			if got := e.reason(); got != tc.want {
				t.Errorf("reason %q, want %q", got, tc.want)
			}
		})
	}
}

func TestValidateControlPlane(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	sa := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(sa, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"standin by default", func(*Config) {}, ""},
		{"real", func(c *Config) {}, ""},
		{"unknown", func(c *Config) { c.ControlPlane = "kind" }, `CONTROL_PLANE="kind"`},
		{"no binaries dir", func(c *Config) { c.KubeAPIServerDir = "" }, "KUBE_APISERVER_DIR is empty"},
		{"no service-account key", func(c *Config) { c.ServiceAccountKeyFile = "" }, "SERVICE_ACCOUNT_KEY_FILE is empty"},
		{"missing service-account key", func(c *Config) { c.ServiceAccountKeyFile = filepath.Join(dir, "nope") }, "SERVICE_ACCOUNT_KEY_FILE"},
		{"bad service range", func(c *Config) { c.ServiceClusterIPRange = "10.0.0.1" }, "SERVICE_CLUSTER_IP_RANGE"},
	}
	for _, tc := range cases {
		c := testConfig(t, dir, pki, "cp-0")
		if tc.name != "standin by default" {
			c.ControlPlane, c.KubeAPIServerDir, c.ServiceAccountKeyFile = nodeapi.ControlPlaneReal, dir, sa
		}
		tc.edit(&c)
		err := c.Validate()
		if tc.wantErr == "" && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err %v, want it to name %q", tc.name, err, tc.wantErr)
		}
		if err == nil {
			back, err := ConfigFromEnv(c.Env())
			if err != nil || back.ControlPlane != c.ControlPlane || back.ServiceAccountKeyFile != c.ServiceAccountKeyFile || back.KubeAPIServerDir != c.KubeAPIServerDir {
				t.Errorf("%s: env round trip: %+v, %v", tc.name, back, err)
			}
		}
	}
}

func TestTCPProxy(t *testing.T) {
	t.Parallel()
	backend := loopbacktest.Serve(t, func(c net.Conn) { defer c.Close(); _, _ = io.Copy(c, c) }) // echo
	p, err := startTCPProxy("127.0.0.1:0", backend.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", p.ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", buf, err)
	}
	// Close ends the forwarded connection too (the static IP detached).
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); err == nil {
		t.Errorf("read %d bytes after Close; want the connection closed", n)
	}
	if c2, err := net.DialTimeout("tcp", p.ln.Addr().String(), time.Second); err == nil {
		c2.Close()
		t.Error("the proxy still accepts after Close")
	}
}

// TestNodeRealAPIServerRefused: with CONTROL_PLANE=real, an apiserver that
// exits before serving (here a stand-in script printing kube-apiserver's
// flag error) is reported refused with its own error, while etcd runs; a
// version without a binary is refused at once.
func TestNodeRealAPIServerRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, version, wantErr string
	}{
		{"exits with a flag error", "v1.33.13", "Error: unknown flag: --no-such-flag"},
		{"no binary for the version", "v1.35.0", "no kube-apiserver binary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pki := newTestPKI(t, dir)
			bins := filepath.Join(dir, "bins")
			installFakeAPIServer(t, bins, "v1.33.13", "#!/bin/sh\necho 'Error: unknown flag: --no-such-flag' >&2\necho 'Usage:' >&2\nexit 1\n", true)
			sa := filepath.Join(dir, "sa.key")
			if err := os.WriteFile(sa, []byte("key"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, dir, pki, "real-0")
			cfg.ControlPlane, cfg.KubeAPIServerDir, cfg.ServiceAccountKeyFile = nodeapi.ControlPlaneReal, bins, sa
			cfg.KubeVersion = tc.version
			startNode(t, cfg)
			st := waitRefused(t, cfg, tc.wantErr)
			if st.ControlPlane != nodeapi.ControlPlaneReal || st.Ready || len(st.Listeners) != 0 {
				t.Errorf("status %+v: want control plane real, not ready, no listeners", st)
			}
		})
	}
}
