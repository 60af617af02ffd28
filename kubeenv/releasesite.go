package kubeenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// ReleaseSite is where a provider takes a kube-up master's new release
// from, as kube-up's own upgrade does (cluster/gce/upgrade.sh
// upgrade-master → prepare-upgrade → cluster/gce/util.sh
// tars_from_version): the release's server and manifests tarballs under
// Base (dl.k8s.io's release directory, or an operator's mirror), with
// the hashes published beside them (<url>.sha512), fetched once per
// version. A master's version is its server tarball: the release its URL
// names ("" for kube-up's devel upload), KUBE_VERSION only for a master
// without a tarball URL.
type ReleaseSite struct {
	// Base is the release directory (DefaultReleaseURL).
	Base string
	// Flag is the option that sets Base, named in errors.
	Flag string
	// Client fetches the .sha512 files.
	Client *http.Client

	mu     sync.Mutex
	hashes map[string]ReleaseHashes
}

// Version is the version a master's kube-env boots: the release its
// server tarball URL names, KUBE_VERSION without a tarball URL.
func (s *ReleaseSite) Version(env map[string]string) string {
	if u := env[ServerBinaryTarURL]; u != "" {
		return ReleaseVersion(u, s.Base)
	}
	return env[KubeVersion]
}

// Check fails unless version's release can be had for masters booting
// envs: nothing is needed when none has a tarball URL (KUBE_VERSION).
func (s *ReleaseSite) Check(ctx context.Context, version string, envs []map[string]string) error {
	need, manifests := false, false
	for _, env := range envs {
		if env[ServerBinaryTarURL] != "" {
			need = true
			manifests = manifests || HasManifests(env)
		}
	}
	if !need {
		return nil
	}
	_, err := s.Hashes(ctx, version, manifests)
	return err
}

// Resolve returns env pointing at version's release (a copy; KUBE_VERSION
// dropped), fetching its hashes first, so a version without a release
// changes nothing. env without a tarball URL, an empty version or env
// already at version come back as they are.
func (s *ReleaseSite) Resolve(ctx context.Context, env map[string]string, version string) (map[string]string, error) {
	if version == "" || env[ServerBinaryTarURL] == "" || s.Version(env) == version {
		return env, nil
	}
	h, err := s.Hashes(ctx, version, HasManifests(env))
	if err != nil {
		return env, err
	}
	out := maps.Clone(env)
	if err := SetRelease(out, s.Base, version, h); err != nil {
		return env, errkind.Errorf(errkind.InvalidArgument, "--version %s: %w", version, err)
	}
	delete(out, KubeVersion)
	return out, nil
}

// Hashes fetches (once per version) the published hashes of version's
// tarballs, as tars_from_version does.
func (s *ReleaseSite) Hashes(ctx context.Context, version string, manifests bool) (ReleaseHashes, error) {
	if !IsReleaseVersion(version) {
		return ReleaseHashes{}, errkind.Errorf(errkind.InvalidArgument,
			"--version %s: kube-up masters boot from a release tarball and %q is not a release version (vMAJOR.MINOR.PATCH[-rc.N], cluster/common.sh KUBE_RELEASE_VERSION_REGEX)", version, version)
	}
	s.mu.Lock()
	h, ok := s.hashes[version]
	s.mu.Unlock()
	if ok && (h.Manifests != "" || !manifests) {
		return h, nil
	}
	server, mURL := ReleaseURLs(s.Base, version)
	var err error
	if h.Server, err = s.fetchSHA512(ctx, version, server); err != nil {
		return ReleaseHashes{}, err
	}
	if manifests {
		if h.Manifests, err = s.fetchSHA512(ctx, version, mURL); err != nil {
			return ReleaseHashes{}, err
		}
	}
	s.mu.Lock()
	if s.hashes == nil {
		s.hashes = map[string]ReleaseHashes{}
	}
	s.hashes[version] = h
	s.mu.Unlock()
	return h, nil
}

// fetchSHA512 GETs <tarball>.sha512, retrying while the site is
// unavailable (transport errors, 429, 5xx); a missing one is the
// version's absence from the site.
func (s *ReleaseSite) fetchSHA512(ctx context.Context, version, tarball string) (string, error) {
	u := tarball + ".sha512"
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	get := func() (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", errkind.Errorf(errkind.Unavailable, "%w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		switch {
		case err != nil:
			return "", errkind.Errorf(errkind.Unavailable, "read body: %w", err)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			return "", errkind.Errorf(errkind.Unavailable, "%s", resp.Status)
		case resp.StatusCode != http.StatusOK:
			return "", errkind.Errorf(errkind.NotFound, "%s", resp.Status)
		}
		return ParseSHA512File(body)
	}
	delay := 50 * time.Millisecond
	var out string
	var err error
	for attempt := 1; ; attempt++ {
		out, err = get()
		if err == nil || !errors.Is(err, errkind.Unavailable) || attempt == 8 || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(delay/2 + time.Duration(rand.Int64N(int64(delay))))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, errkind.NotFound):
		return "", errkind.Errorf(errkind.InvalidArgument, "--version %s: no release at %s (%v): check --version, or point --%s at a mirror that has it", version, u, err, s.Flag)
	case errors.Is(err, errkind.Unavailable):
		return "", errkind.Errorf(errkind.Unavailable, "--version %s: release hash %s: %w", version, u, err)
	}
	return "", errkind.Errorf(errkind.InvalidArgument, "--version %s: %s: %v", version, u, err)
}

// String names the site for logs.
func (s *ReleaseSite) String() string { return fmt.Sprintf("release site %s", s.Base) }
