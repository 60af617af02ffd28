package gce

import (
	"context"
	"fmt"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// A kube-up master's version is its server tarball (kube-env
// SERVER_BINARY_TAR_URL, checked against SERVER_BINARY_TAR_HASH by
// configure.sh's download-or-bust): Template.Version is the version a
// release URL names ("" for kube-up's devel upload, whose URL names
// none), and a new version is written as kube-up's own upgrade writes it
// (cluster/gce/upgrade.sh upgrade-master → prepare-upgrade →
// cluster/gce/util.sh tars_from_version): the release's server and
// manifests tarball URLs under OptReleaseURL, with the hashes published
// beside them (<url>.sha512; kubeenv.ReleaseSite). KUBE_VERSION, which no
// kube-up master reads, is written only for masters without a tarball
// URL.

var _ providers.ReleaseChecker = (*Provider)(nil)

// CheckRelease implements providers.ReleaseChecker: when any master boots
// from a server tarball, version's release must be published under
// OptReleaseURL (its .sha512 files fetched). Masters without a tarball
// URL (KUBE_VERSION) need nothing.
func (p *Provider) CheckRelease(ctx context.Context, version string) error {
	raw, err := p.inst.listRaw(ctx)
	if err != nil {
		return err
	}
	var envs []map[string]string
	for _, x := range raw {
		env, err := instanceEnv(x.GetMetadata().GetItems())
		if err != nil {
			return fmt.Errorf("instance %s: %w", x.GetName(), err)
		}
		envs = append(envs, env)
	}
	return p.site.Check(ctx, version, envs)
}

// templateVersion is Template.Version of a master's kube-env.
func (p *Provider) templateVersion(env map[string]string) string { return p.site.Version(env) }

// resolveRelease returns tmpl with its kube-env pointing at the release
// of tmpl.Version, fetching the release's hashes: called before anything
// changes, so a version without a release touches nothing.
func (p *Provider) resolveRelease(ctx context.Context, tmpl providers.Template) (providers.Template, error) {
	env, err := p.site.Resolve(ctx, tmpl.Env, tmpl.Version)
	if err != nil {
		return tmpl, err
	}
	out := tmpl
	out.Env = env
	return out, nil
}

// instanceEnv parses an instance's kube-env item (empty without one).
func instanceEnv(items []*computepb.Items) (map[string]string, error) {
	for _, it := range items {
		if it.GetKey() == kubeenv.KeyEnv {
			env, err := kubeenv.Parse(it.GetValue())
			if err != nil {
				return nil, fmt.Errorf("metadata %s: %w", kubeenv.KeyEnv, err)
			}
			return env, nil
		}
	}
	return map[string]string{}, nil
}
