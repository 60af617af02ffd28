package kubeup

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// Metadata is kube-up's GCE master format (providers.Format): the two
// metadata items cluster/gce/util.sh create-master writes and
// configure.sh reads at boot.
//
//	kube-env           Template.Env, as kube-up's `KEY: 'value'` lines;
//	                   ExtraArgs ↔ APISERVER_TEST_ARGS, which
//	                   configure-kubeapiserver.sh start-kube-apiserver
//	                   appends to the apiserver's flags; Version ↔ the
//	                   release SERVER_BINARY_TAR_URL names ("" for
//	                   kube-up's devel upload), or KUBE_VERSION for a
//	                   master without a tarball URL
//	kube-master-certs  Template.Files: each kube-up key (CA_KEY,
//	                   ETCD_APISERVER_CLIENT_CERT…) base64-decoded, and
//	                   hamaster's own files under their names
//
// A new version is written as kube-up's own upgrade writes it
// (cluster/gce/upgrade.sh upgrade-master → prepare-upgrade →
// cluster/gce/util.sh tars_from_version): the release's server and
// manifests tarball URLs under the provider's release directory
// (providers.ReleaseSource), with the hashes published beside them
// (<url>.sha512, fetched once per version: kubeenv.ReleaseSite), which
// configure.sh download-or-bust checks at boot. KUBE_VERSION, which no
// kube-up master reads, is written only for masters without a tarball URL.
type Metadata struct{ rel *releases }

var _ providers.Format = (*Metadata)(nil)

// releases is where a kube-up master's new release comes from: the
// provider's release directory (providers.ReleaseSource) or dl.k8s.io.
type releases struct{ site *kubeenv.ReleaseSite }

// newReleases takes new releases from base ("" for dl.k8s.io), which
// option sets (named in errors).
func newReleases(base, option string) (*releases, error) {
	site := &kubeenv.ReleaseSite{Base: kubeenv.DefaultReleaseURL, Flag: option, Client: &http.Client{Timeout: time.Minute}}
	if base != "" {
		if err := kubeenv.CheckReleaseBase(base); err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %w", option, err)
		}
		site.Base = strings.TrimSuffix(base, "/")
	}
	return &releases{site: site}, nil
}

// check fails unless version's release can be had for the masters whose
// kube-env is envs (nothing is needed when none boots from a tarball).
func (r *releases) check(ctx context.Context, version string, envs []map[string]string) error {
	return r.site.Check(ctx, version, envs)
}

// kubeEnv is the kube-env t is written as, on either cloud: t.Env
// pointing at t.Version's release (its hashes fetched first), KUBE_VERSION
// only for a master without a tarball URL, and t.ExtraArgs as
// APISERVER_TEST_ARGS (configure-kubeapiserver.sh start-kube-apiserver
// appends it to the apiserver's flags).
func (r *releases) kubeEnv(ctx context.Context, t providers.Template) (map[string]string, error) {
	env, err := r.site.Resolve(ctx, t.Env, t.Version)
	if err != nil {
		return nil, err
	}
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	if t.Version != "" && env[kubeenv.ServerBinaryTarURL] == "" {
		env[kubeenv.KubeVersion] = t.Version
	}
	if len(t.ExtraArgs) > 0 {
		env[kubeenv.APIServerTestArgs] = strings.Join(t.ExtraArgs, " ")
	}
	return env, nil
}

// readKubeEnv sets t's Version, ExtraArgs and Env from a master's kube-env
// (env, taken: KUBE_VERSION and APISERVER_TEST_ARGS leave it), as kubeEnv
// writes them.
func (r *releases) readKubeEnv(t *providers.Template, env map[string]string) {
	t.Version = r.site.Version(env)
	t.ExtraArgs = strings.Fields(env[kubeenv.APIServerTestArgs])
	delete(env, kubeenv.KubeVersion)
	delete(env, kubeenv.APIServerTestArgs)
	t.Env = env
}

// NewMetadata is kube-up's GCE format taking new releases from base (""
// for dl.k8s.io), which option sets (named in errors).
func NewMetadata(base, option string) (*Metadata, error) {
	rel, err := newReleases(base, option)
	if err != nil {
		return nil, err
	}
	return &Metadata{rel: rel}, nil
}

// NewUserData is kube-up's AWS format taking new releases from base (""
// for dl.k8s.io), which option sets (named in errors).
func NewUserData(base, option string) (*UserData, error) {
	rel, err := newReleases(base, option)
	if err != nil {
		return nil, err
	}
	return &UserData{rel: rel}, nil
}

// Owns implements providers.Format.
func (*Metadata) Owns(key string) bool { return key == kubeenv.KeyEnv || key == kubeenv.KeyCerts }

// Decode implements providers.Format.
func (m *Metadata) Decode(docs map[string]string) (providers.Template, error) {
	t := providers.Template{Env: map[string]string{}, Files: map[string][]byte{}}
	if item, ok := docs[kubeenv.KeyEnv]; ok {
		env, err := kubeenv.Parse(item)
		if err != nil {
			return t, fmt.Errorf("metadata %s: %w", kubeenv.KeyEnv, err)
		}
		m.rel.readKubeEnv(&t, env)
	}
	if item, ok := docs[kubeenv.KeyCerts]; ok {
		files, err := templateFiles(item)
		if err != nil {
			return t, fmt.Errorf("metadata %s: %w", kubeenv.KeyCerts, err)
		}
		t.Files = files
	}
	return t, nil
}

// Encode implements providers.Format: a new version's release hashes
// are fetched first, so a version without a release writes nothing.
func (m *Metadata) Encode(ctx context.Context, t providers.Template) (map[string]string, error) {
	env, err := m.rel.kubeEnv(ctx, t)
	if err != nil {
		return nil, err
	}
	return map[string]string{kubeenv.KeyEnv: kubeenv.Render(env), kubeenv.KeyCerts: certsItem(t.Files)}, nil
}

// kubeUpKeyRE matches kube-master-certs keys (shell variable names in
// capitals: CA_KEY, ETCD_APISERVER_CLIENT_CERT); hamaster's own file names
// (ca.crt) never match.
var kubeUpKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// templateFiles reads kube-master-certs into Template.Files: each kube-up
// key with its value base64-decoded (so gzip bytes for
// ETCD_APISERVER_* certificates), and hamaster's own files under their
// names (kubeenv.FileKey in the item); certsItem writes it back unchanged.
func templateFiles(item string) (map[string][]byte, error) {
	all, err := kubeenv.ParseCerts(item)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(all))
	for k, v := range all {
		if n, ok := kubeenv.FileName(k); ok {
			k = n
		}
		out[k] = v
	}
	return out, nil
}

func certsItem(files map[string][]byte) string {
	m := make(map[string][]byte, len(files))
	for k, v := range files {
		if !kubeUpKeyRE.MatchString(k) {
			k = kubeenv.FileKey(k)
		}
		m[k] = v
	}
	return kubeenv.RenderCerts(m)
}
