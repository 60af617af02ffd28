package gce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/hamaster/hamaster/errkind"
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
// beside them (<url>.sha512). KUBE_VERSION, which no kube-up master
// reads, is written only for masters without a tarball URL.

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
	need, manifests := false, false
	for _, x := range raw {
		env, err := instanceEnv(x.GetMetadata().GetItems())
		if err != nil {
			return fmt.Errorf("instance %s: %w", x.GetName(), err)
		}
		if env[kubeenv.ServerBinaryTarURL] != "" {
			need = true
			manifests = manifests || kubeenv.HasManifests(env)
		}
	}
	if !need {
		return nil
	}
	_, err = p.releaseHashes(ctx, version, manifests)
	return err
}

// releaseHashes fetches (once per provider) the published hashes of
// version's tarballs, as tars_from_version does.
func (p *Provider) releaseHashes(ctx context.Context, version string, manifests bool) (kubeenv.ReleaseHashes, error) {
	if !kubeenv.IsReleaseVersion(version) {
		return kubeenv.ReleaseHashes{}, errkind.Errorf(errkind.InvalidArgument,
			"--version %s: kube-up masters boot from a release tarball and %q is not a release version (vMAJOR.MINOR.PATCH[-rc.N], cluster/common.sh KUBE_RELEASE_VERSION_REGEX)", version, version)
	}
	p.mu.Lock()
	h, ok := p.releases[version]
	p.mu.Unlock()
	if ok && (h.Manifests != "" || !manifests) {
		return h, nil
	}
	server, mURL := kubeenv.ReleaseURLs(p.releaseURL, version)
	var err error
	if h.Server, err = p.fetchSHA512(ctx, version, server); err != nil {
		return kubeenv.ReleaseHashes{}, err
	}
	if manifests {
		if h.Manifests, err = p.fetchSHA512(ctx, version, mURL); err != nil {
			return kubeenv.ReleaseHashes{}, err
		}
	}
	p.mu.Lock()
	p.releases[version] = h
	p.mu.Unlock()
	return h, nil
}

// fetchSHA512 GETs <tarball>.sha512; a missing one is the version's
// absence from the release site.
func (p *Provider) fetchSHA512(ctx context.Context, version, tarball string) (string, error) {
	u := tarball + ".sha512"
	var out string
	err := retry(ctx, "GET "+u, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := p.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			return errkind.Errorf(errkind.Unavailable, "%w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		switch {
		case err != nil:
			return errkind.Errorf(errkind.Unavailable, "read body: %w", err)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			return errkind.Errorf(errkind.Unavailable, "%s", resp.Status)
		case resp.StatusCode != http.StatusOK:
			return errkind.Errorf(errkind.NotFound, "%s", resp.Status)
		}
		out, err = kubeenv.ParseSHA512File(body)
		return err
	})
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, errkind.NotFound):
		return "", errkind.Errorf(errkind.InvalidArgument, "--version %s: no release at %s (%v): check --version, or point --%s at a mirror that has it", version, u, err, OptReleaseURL)
	case errors.Is(err, errkind.Unavailable):
		return "", errkind.Errorf(errkind.Unavailable, "--version %s: release hash %s: %w", version, u, err)
	}
	return "", errkind.Errorf(errkind.InvalidArgument, "--version %s: %s: %v", version, u, err)
}

// templateVersion is Template.Version of a master's kube-env: the release
// its server tarball URL names, KUBE_VERSION without a tarball URL.
func (p *Provider) templateVersion(env map[string]string) string {
	if u := env[kubeenv.ServerBinaryTarURL]; u != "" {
		return kubeenv.ReleaseVersion(u, p.releaseURL)
	}
	return env[envKubeVersion]
}

// resolveRelease returns tmpl with its kube-env pointing at the release
// of tmpl.Version, fetching the release's hashes: called before anything
// changes, so a version without a release touches nothing. A template
// already at that release (or without a version, or without a tarball
// URL) is returned as it is.
func (p *Provider) resolveRelease(ctx context.Context, tmpl providers.Template) (providers.Template, error) {
	if tmpl.Version == "" || tmpl.Env[kubeenv.ServerBinaryTarURL] == "" || p.templateVersion(tmpl.Env) == tmpl.Version {
		return tmpl, nil
	}
	h, err := p.releaseHashes(ctx, tmpl.Version, kubeenv.HasManifests(tmpl.Env))
	if err != nil {
		return tmpl, err
	}
	out := tmpl.Clone()
	if err := kubeenv.SetRelease(out.Env, p.releaseURL, tmpl.Version, h); err != nil {
		return tmpl, errkind.Errorf(errkind.InvalidArgument, "--version %s: %w", tmpl.Version, err)
	}
	delete(out.Env, envKubeVersion)
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
