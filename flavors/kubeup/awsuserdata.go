package kubeup

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// kube-up's AWS master contract (kubernetes cluster/aws/util.sh up to
// v1.8, start-master; the kubemark variant in setup-kubemark-master-env
// adds MASTER_EIP): the master's user data is a bash script,
// gzip-compressed before it is passed to run-instances
// (`gzip master-user-data`, `--user-data fileb://…gz`), that
//
//	#! /bin/bash
//	mkdir -p /var/cache/kubernetes-install
//	cd /var/cache/kubernetes-install
//	cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML
//	<kube-env: write-master-env's KEY: 'value' lines>
//	AUTO_UPGRADE: 'true'
//	DOCKER_STORAGE: '…'
//	API_SERVERS: '<the master's internal IP>'
//	MASTER_EIP: '<the Elastic IP>'
//	__EOF_MASTER_KUBE_ENV_YAML
//	<download the bootstrap script and run it, also from rc.local>
//
// The kube-env has GCE's semantics (kubeenv): INITIAL_ETCD_CLUSTER,
// INITIAL_ETCD_CLUSTER_STATE, the etcd and apiserver certificates. The
// script around the heredoc is kept byte for byte in a clone; only the
// heredoc's YAML is rewritten. Anything else in user data is refused with
// an error saying what was expected.

// Keys of kube-up's AWS master kube-env that GCE's has not.
const (
	// EnvMasterEIP is the cluster's Elastic IP (MASTER_EIP).
	EnvMasterEIP = "MASTER_EIP"
	// EnvAPIServers is the address nodes reach the apiserver on
	// (API_SERVERS: kube-up writes the master's internal IP).
	EnvAPIServers = "API_SERVERS"
)

// maxUserData is EC2's limit on user data, before base64.
const maxUserData = 16 << 10

const (
	kubeUpShebang    = "#! /bin/bash"
	kubeUpHeredoc    = "cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML"
	kubeUpTerminator = "__EOF_MASTER_KUBE_ENV_YAML"
)

// kubeUpExpected is what every refusal says was expected.
const kubeUpExpected = "want kube-up's AWS master user data (kubernetes cluster/aws/util.sh start-master): a `#! /bin/bash` script, gzip-compressed or not, that writes kube_env.yaml from a heredoc `" + kubeUpHeredoc + "` … `" + kubeUpTerminator + "` holding the kube-env YAML with MASTER_EIP and API_SERVERS"

// KubeUpUserData is a kube-up AWS master's user data taken apart.
type KubeUpUserData struct {
	// Env is the kube_env.yaml heredoc, parsed.
	Env map[string]string
	// Before and After are the script around the heredoc's YAML (Before
	// ends with the heredoc's first line, After starts with its
	// terminator), kept verbatim.
	Before, After string
	// Gzip is whether the user data was gzip-compressed (kube-up's is).
	Gzip bool
}

// ParseKubeUpUserData takes a master's user data (not base64) apart, or
// says why it is not kube-up's AWS master format.
func ParseKubeUpUserData(b []byte) (KubeUpUserData, error) {
	var u KubeUpUserData
	if len(bytes.TrimSpace(b)) == 0 {
		return u, errkind.Errorf(errkind.InvalidArgument, "user data is empty: %s", kubeUpExpected)
	}
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return u, errkind.Errorf(errkind.InvalidArgument, "user data: gzip: %v: %s", err, kubeUpExpected)
		}
		plain, err := io.ReadAll(io.LimitReader(zr, 1<<20))
		if err != nil {
			return u, errkind.Errorf(errkind.InvalidArgument, "user data: gzip: %v: %s", err, kubeUpExpected)
		}
		b, u.Gzip = plain, true
	}
	s := string(b)
	first, _, _ := strings.Cut(s, "\n")
	if strings.TrimRight(first, " \r") != kubeUpShebang && strings.TrimRight(first, " \r") != "#!/bin/bash" {
		return u, errkind.Errorf(errkind.InvalidArgument, "user data starts with %q: %s", describeStart(first), kubeUpExpected)
	}
	start := strings.Index(s, "\n"+kubeUpHeredoc+"\n")
	if start < 0 {
		return u, errkind.Errorf(errkind.InvalidArgument, "user data is a bash script but has no line %q: %s", kubeUpHeredoc, kubeUpExpected)
	}
	bodyStart := start + len(kubeUpHeredoc) + 2
	end := strings.Index(s[bodyStart:], "\n"+kubeUpTerminator+"\n")
	switch {
	case end >= 0:
		end += bodyStart + 1
	case strings.HasPrefix(s[bodyStart:], kubeUpTerminator+"\n"):
		end = bodyStart
	case strings.HasSuffix(s, "\n"+kubeUpTerminator):
		end = len(s) - len(kubeUpTerminator)
	default:
		return u, errkind.Errorf(errkind.InvalidArgument, "user data: the kube_env.yaml heredoc never ends (no line %q): %s", kubeUpTerminator, kubeUpExpected)
	}
	yaml := s[bodyStart:end]
	env, err := kubeenv.Parse(yaml)
	if err != nil {
		return u, errkind.Errorf(errkind.InvalidArgument, "user data: kube_env.yaml: %v", err)
	}
	// The heredoc's delimiter is unquoted: bash expands $ and ` in it at
	// boot, so what the master sees is not what is written. hamaster
	// cannot copy that faithfully.
	for k, v := range env {
		if strings.ContainsAny(v, "$`\\") {
			return u, errkind.Errorf(errkind.InvalidArgument, "user data: kube_env.yaml %s holds $, ` or \\, which bash expands in the unquoted heredoc at boot: hamaster cannot clone it faithfully", k)
		}
	}
	for _, k := range []string{EnvMasterEIP, EnvAPIServers} {
		if _, ok := env[k]; !ok {
			return u, errkind.Errorf(errkind.InvalidArgument, "user data: kube_env.yaml has no %s: %s", k, kubeUpExpected)
		}
	}
	u.Env, u.Before, u.After = env, s[:bodyStart], s[end:]
	return u, nil
}

func describeStart(line string) string {
	if len(line) > 40 {
		line = line[:40] + "…"
	}
	return line
}

// Render writes the user data back (not base64): the same script with the
// heredoc's YAML rendered from Env, gzip-compressed when the source was,
// within EC2's 16 KB.
func (u KubeUpUserData) Render() ([]byte, error) {
	for _, k := range []string{EnvMasterEIP, EnvAPIServers} {
		if _, ok := u.Env[k]; !ok {
			return nil, errkind.Errorf(errkind.InvalidArgument, "kube-up user data: kube_env.yaml needs %s", k)
		}
	}
	for k, v := range u.Env {
		if strings.ContainsAny(v, "$`\\") || strings.Contains(v, kubeUpTerminator) {
			return nil, errkind.Errorf(errkind.InvalidArgument, "kube-up user data: kube_env.yaml %s must not hold $, `, \\ or the heredoc's terminator (the master's bash would change it)", k)
		}
	}
	before, after := u.Before, u.After
	if before == "" {
		before = kubeUpShebang + "\nmkdir -p /var/cache/kubernetes-install\ncd /var/cache/kubernetes-install\n\n" + kubeUpHeredoc + "\n"
	}
	if after == "" {
		after = kubeUpTerminator + "\n"
	}
	plain := before + kubeenv.Render(u.Env) + after
	out := []byte(plain)
	if u.Gzip {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if _, err := zw.Write(out); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		out = buf.Bytes()
	}
	if len(out) > maxUserData {
		return nil, errkind.Errorf(errkind.InvalidArgument, "kube-up user data is %d bytes%s; EC2 allows %d", len(out), map[bool]string{true: " gzip-compressed", false: ""}[u.Gzip], maxUserData)
	}
	return out, nil
}

// String describes the format for --dry-run and errors.
func (u KubeUpUserData) String() string {
	z := "plain"
	if u.Gzip {
		z = "gzip"
	}
	return fmt.Sprintf("kube-up AWS master user data (%s, %d kube-env keys)", z, len(u.Env))
}

// MachineKubeUpScript keeps, in a kube-up master's Template.Machine, the
// script around its kube_env.yaml heredoc and whether it was gzipped
// (JSON): a clone's user data is the same script with its own kube-env.
const MachineKubeUpScript = "kube-up-script"

type scriptSpec struct {
	Before string `json:"before"`
	After  string `json:"after"`
	Gzip   bool   `json:"gzip,omitempty"`
}

// UserData is kube-up's AWS master format (providers.Format on a
// providers.CarrierUserData provider): the one document is the user data
// above. Template.Env is its kube_env.yaml, Machine[MachineKubeUpScript]
// the script around it, ExtraArgs its APISERVER_TEST_ARGS; Version is the release its
// SERVER_BINARY_TAR_URL names ("" for a devel upload), KUBE_VERSION only
// without a tarball URL. A new version is written as on GCE (Metadata):
// the release's tarball URLs and published hashes under the provider's
// release directory, fetched before anything changes.
type UserData struct{ rel *releases }

var _ providers.Format = (*UserData)(nil)

// Owns implements providers.Format: the user data.
func (*UserData) Owns(key string) bool { return key == providers.DocUserData }

// Decode implements providers.Format.
func (f *UserData) Decode(docs map[string]string) (providers.Template, error) {
	u, err := ParseKubeUpUserData([]byte(docs[providers.DocUserData]))
	if err != nil {
		return providers.Template{}, err
	}
	spec, err := json.Marshal(scriptSpec{Before: u.Before, After: u.After, Gzip: u.Gzip})
	if err != nil {
		return providers.Template{}, err
	}
	t := providers.Template{Files: map[string][]byte{}, Machine: map[string]string{MachineKubeUpScript: string(spec)}}
	f.rel.readKubeEnv(&t, u.Env)
	return t, nil
}

// Encode implements providers.Format: the same script with the
// template's kube-env in its heredoc.
func (f *UserData) Encode(ctx context.Context, t providers.Template) (map[string]string, error) {
	env, err := f.rel.kubeEnv(ctx, t)
	if err != nil {
		return nil, err
	}
	var s scriptSpec
	if v := t.Machine[MachineKubeUpScript]; v != "" {
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "template machine setting %s: %v", MachineKubeUpScript, err)
		}
	}
	ud, err := KubeUpUserData{Env: env, Before: s.Before, After: s.After, Gzip: s.Gzip}.Render()
	if err != nil {
		return nil, err
	}
	return map[string]string{providers.DocUserData: string(ud)}, nil
}

// Recognizes reports whether ud is kube-up's AWS master user data.
func Recognizes(ud []byte) bool {
	_, err := ParseKubeUpUserData(ud)
	return err == nil
}
