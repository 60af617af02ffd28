package kubeup

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// kubeUpScript is a master's user data as cluster/aws/util.sh start-master
// writes it (v1.8; MASTER_EIP as in setup-kubemark-master-env).
const kubeUpScript = `#! /bin/bash
mkdir -p /var/cache/kubernetes-install
cd /var/cache/kubernetes-install

cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML
ENV_TIMESTAMP: '2017-09-28T10:00:00+0000'
INSTANCE_PREFIX: 'kubernetes'
INITIAL_ETCD_CLUSTER: 'kubernetes-master'
KUBERNETES_MASTER_NAME: 'kubernetes-master'
CA_CERT: 'LS0tLS1CRUdJTg=='
AUTO_UPGRADE: 'true'
DOCKER_STORAGE: 'aufs'
API_SERVERS: '172.20.0.9'
MASTER_EIP: '52.1.2.3'
__EOF_MASTER_KUBE_ENV_YAML

wget -O bootstrap https://example.test/bootstrap
chmod +x bootstrap
mkdir -p /etc/kubernetes
mv kube_env.yaml /etc/kubernetes
mv bootstrap /etc/kubernetes/
cat > /etc/rc.local << EOF_RC_LOCAL
#!/bin/sh -e
/etc/kubernetes/bootstrap
exit 0
EOF_RC_LOCAL
/etc/kubernetes/bootstrap
`

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// kubeUpScriptWith is the user data kubeUpScript with the first from
// replaced by to.
func kubeUpScriptWith(from, to string) func(*testing.T) []byte {
	return func(*testing.T) []byte { return []byte(strings.Replace(kubeUpScript, from, to, 1)) }
}

func TestParseKubeUpUserData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      func(*testing.T) []byte
		gzip    bool
		wantErr string // "" = parses
	}{
		{"kube-up, gzip", func(t *testing.T) []byte { return gz(t, kubeUpScript) }, true, ""},
		{"kube-up, plain", func(*testing.T) []byte { return []byte(kubeUpScript) }, false, ""},
		{"#!/bin/bash without the space", kubeUpScriptWith("#! /bin/bash", "#!/bin/bash"), false, ""},
		{"empty", func(*testing.T) []byte { return nil }, false, "user data is empty"},
		{"cloud-config", func(*testing.T) []byte { return []byte("#cloud-config\nruncmd: []\n") }, false, `starts with "#cloud-config"`},
		{"hamaster's old MIME layout", func(*testing.T) []byte {
			return []byte("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b--\r\n")
		}, false, `starts with "MIME-Version: 1.0`},
		{"bash without the heredoc", func(*testing.T) []byte { return []byte("#! /bin/bash\necho hi\n") }, false, "has no line \"cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML\""},
		{"heredoc never ends", kubeUpScriptWith("__EOF_MASTER_KUBE_ENV_YAML\n\nwget", "\nwget"), false, "never ends"},
		{"no MASTER_EIP", kubeUpScriptWith("MASTER_EIP: '52.1.2.3'\n", ""), false, "has no MASTER_EIP"},
		{"no API_SERVERS", kubeUpScriptWith("API_SERVERS: '172.20.0.9'\n", ""), false, "has no API_SERVERS"},
		{"not YAML", kubeUpScriptWith("DOCKER_STORAGE: 'aufs'", "DOCKER_STORAGE: [aufs"), false, "kube_env.yaml"},
		{"bash expands a value", kubeUpScriptWith("DOCKER_STORAGE: 'aufs'", "DOCKER_STORAGE: '$STORAGE'"), false, "DOCKER_STORAGE holds $"},
		{"corrupt gzip", func(t *testing.T) []byte { b := gz(t, kubeUpScript); return b[:len(b)/2] }, false, "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := ParseKubeUpUserData(tc.in(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errkind.InvalidArgument) {
					t.Fatalf("err %v, want an InvalidArgument containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "MASTER_EIP") && tc.name != "not YAML" && tc.name != "bash expands a value" {
					t.Errorf("the error does not say what was expected: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.Gzip != tc.gzip {
				t.Errorf("Gzip %v, want %v", u.Gzip, tc.gzip)
			}
			if u.Env["INITIAL_ETCD_CLUSTER"] != "kubernetes-master" || u.Env[EnvMasterEIP] != "52.1.2.3" || u.Env[EnvAPIServers] != "172.20.0.9" || len(u.Env) != 9 {
				t.Errorf("env %v", u.Env)
			}
			if !strings.HasSuffix(u.Before, "cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML\n") || !strings.HasPrefix(u.After, "__EOF_MASTER_KUBE_ENV_YAML\n\nwget") {
				t.Errorf("script around the heredoc: before %q, after %q", u.Before, u.After)
			}
		})
	}
}

// TestKubeUpUserDataRoundTrip: a clone's user data is the same script with
// only the heredoc's YAML changed, compressed as the source was.
func TestKubeUpUserDataRoundTrip(t *testing.T) {
	t.Parallel()
	for _, zip := range []bool{true, false} {
		in := []byte(kubeUpScript)
		if zip {
			in = gz(t, kubeUpScript)
		}
		u, err := ParseKubeUpUserData(in)
		if err != nil {
			t.Fatal(err)
		}
		u.Env["INITIAL_ETCD_CLUSTER"] = "kubernetes-master,kubernetes-master-1a2"
		u.Env["INITIAL_ETCD_CLUSTER_STATE"] = "existing"
		out, err := u.Render()
		if err != nil {
			t.Fatal(err)
		}
		if zip != (len(out) > 2 && out[0] == 0x1f && out[1] == 0x8b) {
			t.Errorf("gzip %v: rendered %q…", zip, out[:2])
		}
		back, err := ParseKubeUpUserData(out)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !maps.Equal(back.Env, u.Env) || back.Before != u.Before || back.After != u.After {
			t.Errorf("round trip changed the user data:\n%+v\n%+v", back, u)
		}
		u.Env["DOCKER_STORAGE"] = "`reboot`"
		if _, err := u.Render(); err == nil {
			t.Errorf("rendered a value bash would run")
		}
		delete(u.Env, "DOCKER_STORAGE")
		noise := make([]byte, maxUserData*2) // incompressible
		if _, err := rand.Read(noise); err != nil {
			t.Fatal(err)
		}
		u.Env["HUGE"] = base64.StdEncoding.EncodeToString(noise)
		if _, err := u.Render(); err == nil || !strings.Contains(err.Error(), "EC2 allows") {
			t.Errorf("oversized user data: %v", err)
		}
	}
}

// The UserData format (providers.Format) reads and writes a template
// through kube-up's script: the script kept around the clone's kube-env,
// Version as KUBE_VERSION for a master without a tarball URL, and the
// apiserver's flags as APISERVER_TEST_ARGS, as on GCE (they were dropped
// before the format moved here).
func TestUserDataFormat(t *testing.T) {
	t.Parallel()
	f, err := NewUserData("", "aws-release-url")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{providers.DocUserData: string(gz(t, kubeUpScript))}
	tmpl, err := f.Decode(docs)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Version != "" || len(tmpl.ExtraArgs) != 0 || tmpl.Env[EnvMasterEIP] != "52.1.2.3" || tmpl.Machine[MachineKubeUpScript] == "" {
		t.Fatalf("decoded %+v", tmpl)
	}
	want := maps.Clone(tmpl.Env)
	tmpl.Version, tmpl.ExtraArgs = "v1.31.0", []string{"--v=4", "--audit-log-maxage=3"}
	out, err := f.Encode(context.Background(), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ParseKubeUpUserData([]byte(out[providers.DocUserData]))
	if err != nil {
		t.Fatal(err)
	}
	if !u.Gzip || u.Env[kubeenv.KubeVersion] != "v1.31.0" || u.Env[kubeenv.APIServerTestArgs] != "--v=4 --audit-log-maxage=3" || !strings.HasPrefix(u.Before, "#! /bin/bash\nmkdir -p /var/cache/kubernetes-install") {
		t.Fatalf("encoded: gzip %v, env %v", u.Gzip, u.Env)
	}
	back, err := f.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Version != "v1.31.0" || strings.Join(back.ExtraArgs, " ") != "--v=4 --audit-log-maxage=3" || !maps.Equal(back.Env, want) {
		t.Fatalf("round trip: version %q, flags %v, env %v; want env %v", back.Version, back.ExtraArgs, back.Env, want)
	}
	if !f.Owns(providers.DocUserData) || f.Owns("kube-env") || !Recognizes([]byte(kubeUpScript)) || Recognizes([]byte("MIME-Version: 1.0\r\n")) {
		t.Fatal("Owns/Recognizes")
	}
}
