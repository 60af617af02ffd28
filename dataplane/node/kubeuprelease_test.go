package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// TestInstallRelease runs configure.sh's download-or-bust of the server
// and manifests tarballs: the version comes from the tarball; a missing
// tarball or a hash mismatch loops (here until the context ends) saying
// why, as the serial console of a real master shows.
func TestInstallRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	server, err := kubeuptest.ServerTarball("v1.31.0")
	if err != nil {
		t.Fatal(err)
	}
	manifests, _ := kubeuptest.ManifestsTarball("v1.31.0")
	serverURL, manifestsURL := kubeenv.ReleaseURLs(kubeenv.DefaultReleaseURL, "v1.31.0")
	sf, mf := write("server.tar.gz", server), write("manifests.tar.gz", manifests)
	good := map[string]string{
		kubeenv.ServerBinaryTarURL: serverURL, kubeenv.ServerBinaryTarHash: kubeenv.SHA512Hex(server),
		kubeenv.KubeManifestsTarURL: manifestsURL, kubeenv.KubeManifestsTarHash: kubeenv.SHA512Hex(manifests),
	}
	with := func(k, v string) map[string]string {
		e := map[string]string{}
		for k, v := range good {
			e[k] = v
		}
		e[k] = v
		return e
	}
	both := map[string]string{serverURL: sf, manifestsURL: mf}
	cases := []struct {
		name      string
		env       map[string]string
		downloads map[string]string
		want      string
		wantLog   string // non-empty: busts, logging this
	}{
		{name: "release", env: good, downloads: both, want: "v1.31.0", wantLog: "== Downloaded " + serverURL},
		{name: "no tarball URL: KUBE_VERSION is the caller's", env: map[string]string{kubeenv.KubeVersion: "v1.30.0"}, want: ""},
		{name: "empty hash is not checked", env: with(kubeenv.ServerBinaryTarHash, ""), downloads: both, want: "v1.31.0"},
		{name: "hash mismatch", env: with(kubeenv.ServerBinaryTarHash, kubeenv.SHA512Hex([]byte("other"))), downloads: both,
			wantLog: "== Hash validation of " + serverURL + " failed. Retrying. =="},
		{name: "manifests hash mismatch", env: with(kubeenv.KubeManifestsTarHash, strings.Repeat("0", 40)), downloads: both,
			wantLog: "corrupted, sha1 "},
		{name: "unreachable", env: good, downloads: map[string]string{}, wantLog: "== Failed to download " + serverURL + ". Retrying. =="},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&log, nil))
			busts := tc.want == "" && tc.wantLog != ""
			// A bust retries until its context ends: 1.5 s of retries;
			// an install that succeeds has a hang guard (a busy race
			// tier can take seconds to unpack).
			limit := 30 * time.Second
			if busts {
				limit = 1500 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			got, err := installRelease(ctx, tc.env, tc.downloads, logger)
			if busts {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("installRelease = %q, %v; want it to retry until the context ends", got, err)
				}
			} else if err != nil || got != tc.want {
				t.Fatalf("installRelease = %q, %v; want %q", got, err, tc.want)
			}
			if tc.wantLog != "" && !strings.Contains(log.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, log.String())
			}
		})
	}
}
