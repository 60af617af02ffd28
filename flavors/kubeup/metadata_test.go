package kubeup

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
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/providers"
)

// (Moved from providers/gce/release_internal_test.go TestResolveRelease,
// which tested the same mapping inside the GCE provider.) The template ↔
// kube-env version mapping on its own: a release site publishing
// v1.31.0's .sha512 files, and masters of each kind kube-up leaves.
func TestMetadataVersion(t *testing.T) {
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
	m, err := NewMetadata(base, "gce-release-url")
	if err != nil {
		t.Fatal(err)
	}
	m.rel.site.Client = srv.Client()

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
		readVersion string // Version decoded from env
		target      string
		want        map[string]string // the env written; nil: env unchanged
		err         string
		kind        error
	}{
		{name: "devel upload to a release", env: devel, readVersion: "", target: "v1.31.0", want: map[string]string{
			kubeenv.ServerBinaryTarURL: server, kubeenv.ServerBinaryTarHash: serverHash,
			kubeenv.KubeManifestsTarURL: manifests, kubeenv.KubeManifestsTarHash: manifestsHash}},
		{name: "no target version keeps the devel upload", env: devel, readVersion: "", target: ""},
		{name: "already at the release (dl.k8s.io) is not rewritten", env: official, readVersion: "v1.31.0", target: "v1.31.0"},
		{name: "a KUBE_VERSION master gets KUBE_VERSION", env: map[string]string{kubeenv.KubeVersion: "v1.30.0"}, readVersion: "v1.30.0", target: "v1.31.0",
			want: map[string]string{kubeenv.KubeVersion: "v1.31.0"}},
		{name: "missing release", env: devel, target: "v1.31.7", kind: errkind.InvalidArgument,
			err: "--version v1.31.7: no release at " + base + "/v1.31.7/kubernetes-server-linux-amd64.tar.gz.sha512"},
		{name: "not a release version", env: devel, target: "v1.31.0-alpha.1.5+abc", kind: errkind.InvalidArgument, err: "is not a release version"},
		{name: "garbage .sha512", env: devel, target: "v1.31.2", kind: errkind.InvalidArgument, err: "not a sha512 hex digest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == "" {
				got, err := m.Decode(map[string]string{kubeenv.KeyEnv: kubeenv.Render(tc.env)})
				if err != nil || got.Version != tc.readVersion {
					t.Errorf("Decode: version %q, %v; want %q", got.Version, err, tc.readVersion)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			in := providers.Template{Version: tc.target, Env: maps.Clone(tc.env)}
			docs, err := m.Encode(ctx, in)
			if tc.err != "" {
				if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Encode = %v; want %v containing %q", err, tc.kind, tc.err)
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
			if got, _ := kubeenv.Parse(docs[kubeenv.KeyEnv]); !maps.Equal(got, want) {
				t.Errorf("kube-env\n got %v\nwant %v", got, want)
			}
			if !maps.Equal(in.Env, tc.env) {
				t.Errorf("the caller's template was modified")
			}
			back, err := m.Decode(docs)
			if err != nil {
				t.Fatal(err)
			}
			if wantV := tc.target; back.Version != wantV {
				t.Errorf("the written kube-env reads back as %q, want %q", back.Version, wantV)
			}
		})
	}
	// Hashes are fetched once per version.
	n := fetches.Load()
	if _, err := m.Encode(context.Background(), providers.Template{Version: "v1.31.0", Env: maps.Clone(devel)}); err != nil || fetches.Load() != n {
		t.Errorf("second encode: %v, %d more fetches", err, fetches.Load()-n)
	}
}

// (Moved from providers/gce/certsitem_test.go, assertions unchanged.) A
// kube-up master's kube-master-certs survives the trip through
// Template.Files unchanged, next to hamaster's own files; ExtraArgs are
// kube-env's APISERVER_TEST_ARGS and come back as they went.
func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	km, err := kubeuptest.NewMaster(kubeuptest.Options{Project: "p", Zone: "us-central1-b", StaticIP: "198.18.0.10"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetadata("", "gce-release-url")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := m.Decode(map[string]string{kubeenv.KeyEnv: km.KubeEnv, kubeenv.KeyCerts: km.MasterCerts, "startup-script": "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	files := tmpl.Files
	files["ca.crt"] = []byte("hamaster's own file")
	tmpl.ExtraArgs = []string{"--v=4", "--audit-log-maxage=3"}
	docs, err := m.Encode(context.Background(), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Owns(kubeenv.KeyEnv) || !m.Owns(kubeenv.KeyCerts) || m.Owns("startup-script") || len(docs) != 2 {
		t.Fatalf("owned documents: %v", keys(docs))
	}
	back, err := m.Decode(docs)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(files, back.Files, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("round trip changed the files:\n got %v\nwant %v", keys(back.Files), keys(files))
	}
	if strings.Join(back.ExtraArgs, " ") != "--v=4 --audit-log-maxage=3" || !maps.Equal(back.Env, tmpl.Env) {
		t.Fatalf("round trip changed the env or flags: %v", back.ExtraArgs)
	}
	if env, _ := kubeenv.Parse(docs[kubeenv.KeyEnv]); env[kubeenv.APIServerTestArgs] != "--v=4 --audit-log-maxage=3" {
		t.Fatalf("APISERVER_TEST_ARGS = %q", env[kubeenv.APIServerTestArgs])
	}
	want, _ := kubeenv.Parse(km.MasterCerts)
	got, _ := kubeenv.Parse(docs[kubeenv.KeyCerts])
	delete(got, kubeenv.FileKey("ca.crt"))
	if !maps.Equal(want, got) {
		t.Fatalf("kube-master-certs values changed")
	}
	if _, err := NewMetadata("gs://bucket/release", "gce-release-url"); !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--gce-release-url") {
		t.Fatalf("a gs:// release directory: %v; want InvalidArgument naming the flag", err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
