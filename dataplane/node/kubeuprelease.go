package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
)

// downloadRetry is download-or-bust's pause between attempts.
const downloadRetry = time.Second

// installRelease is what cluster/gce/gci/configure.sh does before
// configure-helper.sh runs: install-kube-binary-config downloads the
// server tarball SERVER_BINARY_TAR_URL with download-or-bust, checks it
// with validate-hash against SERVER_BINARY_TAR_HASH (sha1 or sha512) and
// unpacks it; install-kube-manifests does the same with
// KUBE_MANIFESTS_TAR_URL / KUBE_MANIFESTS_TAR_HASH. download-or-bust
// retries forever, so a tarball that cannot be had or does not match its
// hash keeps the master from ever starting anything: this loops until ctx
// ends, saying why on each attempt (the serial console).
//
// The version is the tarball's kubernetes/version; "" when kube-env has
// no SERVER_BINARY_TAR_URL (a master not built by kube-up: the caller
// falls back to KUBE_VERSION). downloads maps a URL to the local file the
// VM would get from it (the fake's storage); a URL not in it cannot be
// downloaded.
func installRelease(ctx context.Context, env map[string]string, downloads map[string]string, logger *slog.Logger) (string, error) {
	url := env[kubeenv.ServerBinaryTarURL]
	if url == "" {
		return "", nil
	}
	server, err := downloadOrBust(ctx, url, env[kubeenv.ServerBinaryTarHash], downloads, logger)
	if err != nil {
		return "", err
	}
	version, err := kubeenv.TarballVersion(bytes.NewReader(server))
	if err != nil {
		// tar xzf fails: configure.sh runs under set -o errexit.
		return "", fmt.Errorf("install-kube-binary-config: %s: %w", url, err)
	}
	if m := env[kubeenv.KubeManifestsTarURL]; m != "" {
		if _, err := downloadOrBust(ctx, m, env[kubeenv.KubeManifestsTarHash], downloads, logger); err != nil {
			return "", err
		}
	}
	logger.Info("installed the server tarball", "url", url, "version", version)
	return version, nil
}

// downloadOrBust is configure.sh download-or-bust: fetch url until its
// content matches hash ("" skips the check).
func downloadOrBust(ctx context.Context, url, hash string, downloads map[string]string, logger *slog.Logger) ([]byte, error) {
	tick := time.NewTicker(downloadRetry)
	defer tick.Stop()
	for {
		data, err := fetchMapped(url, downloads)
		if err != nil {
			logger.Error(fmt.Sprintf("== Failed to download %s. Retrying. ==", url), "err", err)
		} else if herr := validate(data, hash); herr != nil {
			logger.Error(fmt.Sprintf("== %s corrupted, %v ==", url, herr))
			logger.Error(fmt.Sprintf("== Hash validation of %s failed. Retrying. ==", url))
		} else {
			logger.Info(fmt.Sprintf("== Downloaded %s (HASH = %s) ==", url, hash))
			return data, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("download-or-bust %s: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

func validate(data []byte, hash string) error {
	if hash == "" {
		return nil
	}
	return kubeenv.ValidateHash(data, hash)
}

func fetchMapped(url string, downloads map[string]string) ([]byte, error) {
	path, ok := downloads[url]
	if !ok {
		return nil, fmt.Errorf("no route to %s from this VM", url)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("404 Not Found: %w", err)
	}
	return b, nil
}
