package gce

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// TestResolveRelease is the template ↔ kube-env version mapping on its
// own: a release site publishing v1.31.0's .sha512 files, and masters of
// each kind kube-up leaves.
func TestResolveRelease(t *testing.T) {
	t.Parallel()
	serverHash, manifestsHash := strings.Repeat("a", 128), strings.Repeat("b", 128)
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		switch r.URL.Path {
		case "/release/v1.31.0/kubernetes-server-linux-amd64.tar.gz.sha512":
			_, _ = w.Write([]byte(serverHash + "\n"))
		case "/release/v1.31.0/kubernetes-manifests.tar.gz.sha512":
			_, _ = w.Write([]byte(manifestsHash))
		case "/release/v1.31.2/kubernetes-server-linux-amd64.tar.gz.sha512":
			_, _ = w.Write([]byte("<html>not a hash</html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	base := srv.URL + "/release"
	p := &Provider{site: &kubeenv.ReleaseSite{Base: base, Flag: OptReleaseURL, Client: srv.Client()}}

	devel := map[string]string{
		kubeenv.ServerBinaryTarURL:   "https://storage.googleapis.com/kubernetes-staging-0123456789/kubernetes-devel/kubernetes-server-linux-amd64.tar.gz",
		kubeenv.ServerBinaryTarHash:  "d",
		kubeenv.KubeManifestsTarURL:  "https://storage.googleapis.com/kubernetes-staging-0123456789/kubernetes-devel/kubernetes-manifests.tar.gz",
		kubeenv.KubeManifestsTarHash: "dm",
	}
	official := map[string]string{kubeenv.ServerBinaryTarURL: "https://dl.k8s.io/release/v1.31.0/kubernetes-server-linux-amd64.tar.gz", kubeenv.ServerBinaryTarHash: "o"}
	server, manifests := kubeenv.ReleaseURLs(base, "v1.31.0")
	cases := []struct {
		name        string
		env         map[string]string
		readVersion string // templateVersion of env
		target      string
		want        map[string]string // nil: unchanged
		err         string
		kind        error
	}{
		{name: "devel upload to a release", env: devel, readVersion: "", target: "v1.31.0", want: map[string]string{
			kubeenv.ServerBinaryTarURL: server, kubeenv.ServerBinaryTarHash: serverHash,
			kubeenv.KubeManifestsTarURL: manifests, kubeenv.KubeManifestsTarHash: manifestsHash}},
		{name: "no target version keeps the devel upload", env: devel, readVersion: "", target: ""},
		{name: "already at the release (dl.k8s.io) is not rewritten", env: official, readVersion: "v1.31.0", target: "v1.31.0"},
		{name: "KUBE_VERSION master is the caller's to write", env: map[string]string{kubeenv.KubeVersion: "v1.30.0"}, readVersion: "v1.30.0", target: "v1.31.0"},
		{name: "missing release", env: devel, target: "v1.31.7", kind: errkind.InvalidArgument,
			err: "--version v1.31.7: no release at " + base + "/v1.31.7/kubernetes-server-linux-amd64.tar.gz.sha512"},
		{name: "not a release version", env: devel, target: "v1.31.0-alpha.1.5+abc", kind: errkind.InvalidArgument, err: "is not a release version"},
		{name: "garbage .sha512", env: devel, target: "v1.31.2", kind: errkind.InvalidArgument, err: "not a sha512 hex digest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == "" {
				if got := p.templateVersion(tc.env); got != tc.readVersion {
					t.Errorf("templateVersion = %q, want %q", got, tc.readVersion)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			in := providers.Template{Version: tc.target, Env: maps.Clone(tc.env)}
			out, err := p.resolveRelease(ctx, in)
			if tc.err != "" {
				if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("resolveRelease = %v; want %v containing %q", err, tc.kind, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == nil {
				want = tc.env
			}
			if !maps.Equal(out.Env, want) {
				t.Errorf("env\n got %v\nwant %v", out.Env, want)
			}
			if !maps.Equal(in.Env, tc.env) {
				t.Errorf("the caller's template was modified")
			}
			if tc.want != nil {
				if got := p.templateVersion(out.Env); got != tc.target {
					t.Errorf("the written env reads back as %q, want %q", got, tc.target)
				}
			}
		})
	}
	// Hashes are fetched once per version.
	n := fetches.Load()
	if _, err := p.resolveRelease(context.Background(), providers.Template{Version: "v1.31.0", Env: maps.Clone(devel)}); err != nil || fetches.Load() != n {
		t.Errorf("second resolve: %v, %d more fetches", err, fetches.Load()-n)
	}
}

// TestReleaseURLOption refuses a --gce-release-url that is not an http(s)
// URL of release directories, naming the flag, before any client is made.
func TestReleaseURLOption(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"dl.k8s.io/release", "gs://kubernetes-release/release", "https://dl.k8s.io/release?x=1"} {
		_, err := New(context.Background(), providers.Settings{Cluster: "c", Options: map[string]string{
			OptProject: "p", OptZones: "us-central1-b", OptSSHUser: "u", OptReleaseURL: bad}})
		if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--"+OptReleaseURL) {
			t.Errorf("--%s %q: %v; want InvalidArgument naming the flag", OptReleaseURL, bad, err)
		}
	}
}
