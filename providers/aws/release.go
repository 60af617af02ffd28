package aws

import (
	"context"

	"github.com/hamaster/hamaster/providers"
)

// A kube-up AWS master's version is its server tarball, as on GCE: its
// kube_env.yaml has SERVER_BINARY_TAR_URL / SERVER_BINARY_TAR_HASH
// (cluster/aws/util.sh upload-server-tars → build-kube-env), which the
// bootstrap script downloads and hash-checks. A new version is written as
// kube-up's upgrade writes it (tars_from_version: the release under
// OptReleaseURL and its published .sha512), through kubeenv.ReleaseSite;
// KUBE_VERSION, which no kube-up master reads, only for masters without a
// tarball URL.

var _ providers.ReleaseChecker = (*Provider)(nil)

// CheckRelease implements providers.ReleaseChecker: when any master boots
// from a server tarball, version's release must be published under
// OptReleaseURL.
func (p *Provider) CheckRelease(ctx context.Context, version string) error {
	rs, err := p.inst.List(ctx)
	if err != nil {
		return err
	}
	envs := make([]map[string]string, 0, len(rs))
	for _, r := range rs {
		envs = append(envs, r.Template.Env)
	}
	return p.site.Check(ctx, version, envs)
}
