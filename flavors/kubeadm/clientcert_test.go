package kubeadm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

func TestAdminGroups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		want    []string
	}{
		{"v1.33.13", []string{"kubeadm:cluster-admins"}},
		{"1.29.0", []string{"kubeadm:cluster-admins"}},
		{"v1.29.0-rc.1", []string{"kubeadm:cluster-admins"}},
		{"v1.28.15", []string{"system:masters"}},
		{"v1.34.4", []string{"kubeadm:cluster-admins"}},
	} {
		got, err := AdminGroups(tc.version)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("AdminGroups(%q) = %v, %v; want %v", tc.version, got, err, tc.want)
		}
	}
	if _, err := AdminGroups("stable-1"); err == nil {
		t.Error("AdminGroups of a label: no error")
	}
}

func TestCheckClientRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		user     string
		groups   []string
		validity time.Duration
		want     string // "" for accepted
	}{
		{"admin", "hamaster-admin", []string{"kubeadm:cluster-admins"}, time.Hour, ""},
		{"default groups", "alice", nil, MaxClientValidity, ""},
		{"several groups", "alice", []string{"dev", "qa"}, 24 * time.Hour, ""},
		{"empty user", " ", nil, time.Hour, "--user"},
		{"newline in user", "a\nb", nil, time.Hour, "--user"},
		{"comma in group", "alice", []string{"dev,qa"}, time.Hour, "--group"},
		{"quote in group", "alice", []string{`"dev"`}, time.Hour, "--group"},
		{"empty group", "alice", []string{""}, time.Hour, "--group"},
		{"no validity", "alice", nil, 0, "--validity"},
		{"over a year", "alice", nil, MaxClientValidity + time.Second, "--validity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckClientRequest(tc.user, tc.groups, tc.validity)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want InvalidArgument naming %s", err, tc.want)
			}
		})
	}
}

// TestUserCommand: kubeadm gets the flags and the cluster's own
// ClusterConfiguration on its stdin, every value quoted for sh.
func TestUserCommand(t *testing.T) {
	t.Parallel()
	doc := fixture(t, "cluster-configuration-v1.33.13.yaml")
	cmd, err := UserCommand(doc, "o'brien", []string{"dev", "kubeadm:cluster-admins"}, 36*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(cmd, "\n")
	want := `kubeadm kubeconfig user --client-name 'o'\''brien' --org 'dev' --org 'kubeadm:cluster-admins' --validity-period 36h0m0s --config /dev/stdin <<'` + configDelimiter + `'`
	if first != want {
		t.Errorf("command line:\n got %s\nwant %s", first, want)
	}
	if rest != strings.TrimRight(string(doc), "\n")+"\n"+configDelimiter+"\n" {
		t.Errorf("here-document:\n%s", rest)
	}
	for _, tc := range []struct {
		name string
		doc  string
		user string
		grp  []string
		want string
	}{
		{"no groups", string(doc), "a", []string{}, "--group"},
		{"bad user", string(doc), "", []string{"g"}, "--user"},
		{"not a ClusterConfiguration", "apiVersion: v1\nkind: ConfigMap\n", "a", []string{"g"}, "ClusterConfiguration"},
		{"the delimiter inside", string(doc) + "x: |\n  " + configDelimiter + "\n", "a", []string{"g"}, "here-document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := UserCommand([]byte(tc.doc), tc.user, tc.grp, time.Hour); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one naming %q", err, tc.want)
			}
		})
	}
}

func TestEndpointURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"198.18.7.100:8443": "https://198.18.7.100:8443",
		"lb.example.com":    "https://lb.example.com:6443",
		"[fd00::1]:443":     "https://[fd00::1]:443",
	} {
		if got, err := EndpointURL(in); err != nil || got != want {
			t.Errorf("EndpointURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := EndpointURL("a:b:c"); err == nil {
		t.Error("EndpointURL of garbage: no error")
	}
}

// userKubeconfig is a kubeconfig as `kubeadm kubeconfig user` prints it
// (clientcmd.Write), its certificate signed by ca.
func userKubeconfig(t *testing.T, ca *certs.CA, server, user string, groups []string, validity time.Duration) string {
	t.Helper()
	pair, err := ca.IssueClientFor(user, groups, certs.ECDSA, validity)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: %s
  name: %s@kubernetes
current-context: %s@kubernetes
kind: Config
preferences: {}
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s

`, b64(ca.CertPEM), server, user, user, user, user, b64(pair.CertPEM), b64(pair.KeyPEM))
}

func TestParseAndCheckUserKubeconfig(t *testing.T) {
	t.Parallel()
	ca, err := certs.NewCA("kubernetes", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("kubernetes", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	doc := userKubeconfig(t, ca, "https://10.0.0.1:6443", "alice", []string{"dev"}, time.Hour)
	kc, err := ParseUserKubeconfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if kc.Server != "https://10.0.0.1:6443" || kc.UserName != "alice" || kc.ClusterName != "kubernetes" || string(kc.CACertPEM) != string(ca.CertPEM) {
		t.Errorf("parsed %+v", kc)
	}
	soon := time.Now().Add(2 * time.Hour)
	if err := CheckUserCertificate(kc, "alice", []string{"dev"}, soon); err != nil {
		t.Errorf("CheckUserCertificate: %v", err)
	}
	for _, tc := range []struct {
		name     string
		edit     func(*UserKubeconfig)
		user     string
		groups   []string
		notAfter time.Time
		want     string
	}{
		{"another user", nil, "bob", []string{"dev"}, soon, "CN="},
		{"other groups", nil, "alice", []string{"kubeadm:cluster-admins"}, soon, "O="},
		{"too long", nil, "alice", []string{"dev"}, time.Now().Add(30 * time.Minute), "expires"},
		{"another CA", func(k *UserKubeconfig) { k.CACertPEM = other.CertPEM }, "alice", []string{"dev"}, soon, "cluster CA"},
		{"another key", func(k *UserKubeconfig) {
			p, _ := ca.IssueClient("alice", []string{"dev"}, certs.ECDSA)
			k.KeyPEM = p.KeyPEM
		}, "alice", []string{"dev"}, soon, "key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kc
			if tc.edit != nil {
				tc.edit(&k)
			}
			if err := CheckUserCertificate(k, tc.user, tc.groups, tc.notAfter); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one naming %q", err, tc.want)
			}
		})
	}
	for name, bad := range map[string]string{
		"not yaml":     "{",
		"no user":      "clusters: [{name: k, cluster: {server: x, certificate-authority-data: eA==}}]\n",
		"empty key":    strings.Replace(doc, "client-key-data: ", "client-key-data: x", 1),
		"two clusters": strings.Replace(doc, "clusters:\n", "clusters:\n- cluster: {server: y}\n  name: y\n", 1),
	} {
		_, err := ParseUserKubeconfig([]byte(bad))
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(kc.KeyPEM)[:20]) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
}

// masters is a provider whose Instances lists rs; its apiservers are at
// https://<address>:6443.
type masters struct {
	providers.Provider
	rs []providers.Replica
}

func (m masters) Name() string                   { return "fake" }
func (m masters) Instances() providers.Instances { return m }
func (m masters) APIServerURL(r providers.Replica) string {
	return "https://" + net.JoinHostPort(r.Address, "6443")
}

// Instances' List; the rest of providers.Instances is not used.
func (m masters) List(context.Context) ([]providers.Replica, error) { return m.rs, nil }
func (masters) Get(context.Context, string) (providers.Replica, error) {
	return providers.Replica{}, errors.New("unused")
}
func (masters) ReserveAddress(context.Context, string, string) (string, error) {
	return "", errors.New("unused")
}
func (masters) ReleaseAddress(context.Context, string) error { return errors.New("unused") }
func (masters) Create(context.Context, string, string, providers.Template) (providers.Replica, error) {
	return providers.Replica{}, errors.New("unused")
}
func (masters) Recreate(context.Context, string, providers.Template) (providers.Replica, error) {
	return providers.Replica{}, errors.New("unused")
}
func (masters) Delete(context.Context, string) error { return errors.New("unused") }

// kubeadmMachines answers kubectl's read of kubeadm-config and `kubeadm
// kubeconfig user` on each master as the real ones do, signing with ca;
// a master in down does not answer, one in noKey has no CA key.
type kubeadmMachines struct {
	ca          *certs.CA
	config      string
	down, noKey map[string]bool

	mu   sync.Mutex
	cmds []string // "master: first line"
}

var (
	clientNameRE = regexp.MustCompile(`--client-name ('[^']*')`)
	orgRE        = regexp.MustCompile(`--org ('[^']*')`)
	validityRE   = regexp.MustCompile(`--validity-period (\S+)`)
)

func unquote(s string) string { return strings.Trim(s, "'") }

func (k *kubeadmMachines) DialMachine(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no tunnels here")
}
func (k *kubeadmMachines) MachineHostname(replica, _ string) string { return replica }
func (k *kubeadmMachines) RunOnMachine(ctx context.Context, machine, cmd string) ([]byte, []byte, error) {
	first, _, _ := strings.Cut(cmd, "\n")
	k.mu.Lock()
	k.cmds = append(k.cmds, machine+": "+first)
	k.mu.Unlock()
	if !providers.IsReadOnly(ctx) {
		return nil, nil, fmt.Errorf("%s: a command not marked read-only: %s", machine, first)
	}
	if k.down[machine] {
		return nil, nil, fmt.Errorf("dial %s: connection refused", machine)
	}
	switch {
	case strings.Contains(cmd, "get configmap kubeadm-config"):
		return []byte(k.config), nil, nil
	case strings.HasPrefix(cmd, "kubeadm kubeconfig user "):
		if k.noKey[machine] {
			stderr := "couldn't create a kubeconfig; the CA files couldn't be loaded: failed to load key: couldn't load the private key file /etc/kubernetes/pki/ca.key: open /etc/kubernetes/pki/ca.key: no such file or directory"
			return nil, []byte(stderr), &remote.ExitError{Addr: machine, Cmd: cmd, Status: 1, StderrTail: stderr}
		}
		if !strings.Contains(cmd, "--config /dev/stdin <<'"+configDelimiter+"'\n"+strings.TrimRight(k.config, "\n")+"\n") {
			return nil, nil, fmt.Errorf("%s: kubeadm without the cluster's configuration: %s", machine, cmd)
		}
		var groups []string
		for _, m := range orgRE.FindAllStringSubmatch(first, -1) {
			groups = append(groups, unquote(m[1]))
		}
		v, err := time.ParseDuration(validityRE.FindStringSubmatch(first)[1])
		if err != nil {
			return nil, nil, err
		}
		user := unquote(clientNameRE.FindStringSubmatch(first)[1])
		return []byte(k.kubeconfig(user, groups, v)), nil, nil
	}
	return nil, nil, fmt.Errorf("%s: unexpected command %s", machine, first)
}

// kubeconfig is kubeadm's output, made without a testing.T.
func (k *kubeadmMachines) kubeconfig(user string, groups []string, v time.Duration) string {
	pair, err := k.ca.IssueClientFor(user, groups, certs.ECDSA, v)
	if err != nil {
		return err.Error()
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: %s\n    server: https://192.0.2.9:6443\n  name: kubernetes\nusers:\n- name: %s\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n",
		b64(k.ca.CertPEM), user, b64(pair.CertPEM), b64(pair.KeyPEM))
}

func TestIssueClient(t *testing.T) {
	t.Parallel()
	ca, err := certs.NewCA("kubernetes", certs.ECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	single := string(fixture(t, "cluster-configuration-v1.33.13.yaml"))
	ha := strings.Replace(single, "kind: ClusterConfiguration\n", "controlPlaneEndpoint: 198.18.7.100:8443\nkind: ClusterConfiguration\n", 1)
	old := strings.Replace(single, "kubernetesVersion: 1.33.0", "kubernetesVersion: v1.28.15", 1)
	m0 := providers.Replica{Name: "host-1", Address: "198.18.7.1", State: providers.StateRunning}
	m1 := providers.Replica{Name: "host-2", Address: "198.18.7.2", State: providers.StateRunning}
	stopped := providers.Replica{Name: "host-3", Address: "198.18.7.3", State: providers.StateStopped}
	for _, tc := range []struct {
		name        string
		rs          []providers.Replica
		config      string
		down, noKey []string
		req         flavors.ClientRequest
		// want: the server, the groups and the master; or wantErr
		server, master string
		groups         []string
		wantErr        string
		kind           error
	}{
		{name: "single master: its own address, kubeadm's admin group",
			rs: []providers.Replica{m0}, config: single, req: flavors.ClientRequest{User: "hamaster-admin"},
			server: "https://198.18.7.1:6443", master: "host-1", groups: []string{"kubeadm:cluster-admins"}},
		{name: "converted: the VIP",
			rs: []providers.Replica{m0, m1}, config: ha, req: flavors.ClientRequest{User: "hamaster-admin", Validity: time.Hour},
			server: "https://198.18.7.100:8443", master: "host-1", groups: []string{"kubeadm:cluster-admins"}},
		{name: "groups asked for",
			rs: []providers.Replica{m0}, config: ha, req: flavors.ClientRequest{User: "alice", Groups: []string{"dev", "qa"}, Validity: 24 * time.Hour},
			server: "https://198.18.7.100:8443", master: "host-1", groups: []string{"dev", "qa"}},
		{name: "before v1.29: system:masters",
			rs: []providers.Replica{m0}, config: old, req: flavors.ClientRequest{User: "hamaster-admin"},
			server: "https://198.18.7.1:6443", master: "host-1", groups: []string{"system:masters"}},
		{name: "the first master down: the next one",
			rs: []providers.Replica{stopped, m0, m1}, config: ha, down: []string{"host-1"}, req: flavors.ClientRequest{User: "hamaster-admin"},
			server: "https://198.18.7.100:8443", master: "host-2", groups: []string{"kubeadm:cluster-admins"}},
		{name: "no running master",
			rs: []providers.Replica{stopped}, config: ha, req: flavors.ClientRequest{User: "hamaster-admin"},
			wantErr: "no master is running to issue a client certificate on (host-3 stopped)", kind: errkind.FailedPrecondition},
		{name: "every master down",
			rs: []providers.Replica{m0, m1}, config: ha, down: []string{"host-1", "host-2"}, req: flavors.ClientRequest{User: "hamaster-admin"},
			wantErr: "master host-2", kind: errkind.Unavailable},
		{name: "external CA: no key on the masters",
			rs: []providers.Replica{m0}, config: ha, noKey: []string{"host-1"}, req: flavors.ClientRequest{User: "hamaster-admin"},
			wantErr: "master host-1: kubeadm kubeconfig user: the cluster CA's key (/etc/kubernetes/pki/ca.key) is not readable there (kubeadm's external CA mode keeps it off the masters): put it back, or issue", kind: errkind.FailedPrecondition},
		{name: "external CA on one, the other down: try later",
			rs: []providers.Replica{m0, m1}, config: ha, noKey: []string{"host-1"}, down: []string{"host-2"}, req: flavors.ClientRequest{User: "hamaster-admin"},
			wantErr: "master host-2: read kubeadm-config on host-2: dial host-2: connection refused", kind: errkind.Unavailable},
		{name: "a bad request is refused before any master is asked",
			rs: []providers.Replica{m0}, config: ha, req: flavors.ClientRequest{User: "alice", Groups: []string{"a,b"}},
			wantErr: "--group", kind: errkind.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := func(names []string) map[string]bool {
				m := map[string]bool{}
				for _, n := range names {
					m[n] = true
				}
				return m
			}
			km := &kubeadmMachines{ca: ca, config: tc.config, down: set(tc.down), noKey: set(tc.noKey)}
			f := &Flavor{p: masters{rs: tc.rs}, m: km, log: slog.New(slog.DiscardHandler)}
			got, err := f.IssueClient(context.Background(), tc.req)
			if tc.wantErr != "" {
				var k interface{ Unwrap() []error }
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, tc.kind) || !errors.As(err, &k) || k.Unwrap()[0] != tc.kind {
					t.Fatalf("err = %v; want %v naming %q", err, tc.kind, tc.wantErr)
				}
				if tc.kind == errkind.InvalidArgument && len(km.cmds) > 0 {
					t.Errorf("commands run: %v", km.cmds)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Server != tc.server || got.Master != tc.master || !slices.Equal(got.Groups, tc.groups) {
				t.Errorf("server %s master %s groups %v; want %s %s %v", got.Server, got.Master, got.Groups, tc.server, tc.master, tc.groups)
			}
			kc := UserKubeconfig{CACertPEM: got.CACertPEM, CertPEM: got.CertPEM, KeyPEM: got.KeyPEM}
			v := tc.req.Validity
			if v == 0 {
				v = MaxClientValidity
			}
			if err := CheckUserCertificate(kc, tc.req.User, tc.groups, time.Now().Add(v+time.Minute)); err != nil {
				t.Error(err)
			}
			if c, _ := certs.ParseCertPEM(got.CertPEM); c.NotAfter.Before(time.Now().Add(v - time.Minute)) {
				t.Errorf("valid until %s; want %v from now", c.NotAfter, v)
			}
		})
	}
}
