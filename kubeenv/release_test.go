package kubeenv_test

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // validate-hash accepts sha1
	"encoding/hex"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

func TestReleaseVersion(t *testing.T) {
	t.Parallel()
	const mirror = "http://mirror.example:8080/k8s/release/"
	cases := []struct {
		name, url, want string
	}{
		{"dl.k8s.io", "https://dl.k8s.io/release/v1.31.0/kubernetes-server-linux-amd64.tar.gz", "v1.31.0"},
		{"release bucket (older kube-up)", "https://storage.googleapis.com/kubernetes-release/release/v1.29.4/kubernetes-server-linux-amd64.tar.gz", "v1.29.4"},
		{"pre-release", "https://dl.k8s.io/release/v1.32.0-rc.1/kubernetes-server-linux-amd64.tar.gz", "v1.32.0-rc.1"},
		{"mirror", "http://mirror.example:8080/k8s/release/v1.31.2/kubernetes-server-linux-amd64.tar.gz", "v1.31.2"},
		{"devel upload", "https://storage.googleapis.com/kubernetes-staging-0123456789/kubernetes-devel/kubernetes-server-linux-amd64.tar.gz", ""},
		{"ci build", "https://storage.googleapis.com/k8s-release-dev/ci/v1.31.0-alpha.1.5+abc/kubernetes-server-linux-amd64.tar.gz", ""},
		{"not a version", "https://dl.k8s.io/release/latest/kubernetes-server-linux-amd64.tar.gz", ""},
		{"manifests tarball", "https://dl.k8s.io/release/v1.31.0/kubernetes-manifests.tar.gz", ""},
		{"deeper path", "https://dl.k8s.io/release/v1.31.0/x/kubernetes-server-linux-amd64.tar.gz", ""},
		{"other host", "https://example.com/release/v1.31.0/kubernetes-server-linux-amd64.tar.gz", ""},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		if got := kubeenv.ReleaseVersion(tc.url, mirror); got != tc.want {
			t.Errorf("%s: ReleaseVersion(%q) = %q, want %q", tc.name, tc.url, got, tc.want)
		}
	}
}

func TestSetRelease(t *testing.T) {
	t.Parallel()
	h := kubeenv.ReleaseHashes{Server: strings.Repeat("a", 128), Manifests: strings.Repeat("b", 128)}
	devel := map[string]string{
		kubeenv.ServerBinaryTarURL:   "https://storage.googleapis.com/kubernetes-staging-0123456789/kubernetes-devel/kubernetes-server-linux-amd64.tar.gz",
		kubeenv.ServerBinaryTarHash:  "old",
		kubeenv.KubeManifestsTarURL:  "https://storage.googleapis.com/kubernetes-staging-0123456789/kubernetes-devel/kubernetes-manifests.tar.gz",
		kubeenv.KubeManifestsTarHash: "old-m",
		"CLUSTER_NAME":               "kubernetes",
	}
	noManifests := maps.Clone(devel)
	delete(noManifests, kubeenv.KubeManifestsTarURL)
	delete(noManifests, kubeenv.KubeManifestsTarHash)
	cases := []struct {
		name    string
		env     map[string]string
		base    string
		version string
		h       kubeenv.ReleaseHashes
		want    map[string]string
		err     string
	}{
		{name: "devel to release", env: devel, base: kubeenv.DefaultReleaseURL, version: "v1.31.0", h: h, want: map[string]string{
			kubeenv.ServerBinaryTarURL:   "https://dl.k8s.io/release/v1.31.0/kubernetes-server-linux-amd64.tar.gz",
			kubeenv.ServerBinaryTarHash:  h.Server,
			kubeenv.KubeManifestsTarURL:  "https://dl.k8s.io/release/v1.31.0/kubernetes-manifests.tar.gz",
			kubeenv.KubeManifestsTarHash: h.Manifests,
			"CLUSTER_NAME":               "kubernetes",
		}},
		{name: "mirror with trailing slash", env: devel, base: "http://m.example/release/", version: "v1.31.1", h: h, want: map[string]string{
			kubeenv.ServerBinaryTarURL:   "http://m.example/release/v1.31.1/kubernetes-server-linux-amd64.tar.gz",
			kubeenv.ServerBinaryTarHash:  h.Server,
			kubeenv.KubeManifestsTarURL:  "http://m.example/release/v1.31.1/kubernetes-manifests.tar.gz",
			kubeenv.KubeManifestsTarHash: h.Manifests,
			"CLUSTER_NAME":               "kubernetes",
		}},
		{name: "older kube-up: no manifests keys added", env: noManifests, base: kubeenv.DefaultReleaseURL, version: "v1.31.0", h: kubeenv.ReleaseHashes{Server: h.Server}, want: map[string]string{
			kubeenv.ServerBinaryTarURL:  "https://dl.k8s.io/release/v1.31.0/kubernetes-server-linux-amd64.tar.gz",
			kubeenv.ServerBinaryTarHash: h.Server,
			"CLUSTER_NAME":              "kubernetes",
		}},
		{name: "not a release version", env: devel, base: kubeenv.DefaultReleaseURL, version: "latest", h: h, err: "not a release version"},
		{name: "no server hash", env: devel, base: kubeenv.DefaultReleaseURL, version: "v1.31.0", err: "no server tarball hash"},
		{name: "no manifests hash", env: devel, base: kubeenv.DefaultReleaseURL, version: "v1.31.0", h: kubeenv.ReleaseHashes{Server: h.Server}, err: "no manifests tarball hash"},
	}
	for _, tc := range cases {
		env := maps.Clone(tc.env)
		err := kubeenv.SetRelease(env, tc.base, tc.version, tc.h)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !maps.Equal(env, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, env, tc.want)
		}
		if got := kubeenv.ReleaseVersion(env[kubeenv.ServerBinaryTarURL], tc.base); got != tc.version {
			t.Errorf("%s: the written URL reads back as %q", tc.name, got)
		}
	}
}

func TestCheckReleaseBase(t *testing.T) {
	t.Parallel()
	for in, ok := range map[string]bool{
		"https://dl.k8s.io/release": true, "http://10.0.0.5:8080/mirror": true,
		"": false, "dl.k8s.io/release": false, "ftp://x/release": false, "https://x/r?v=1": false, "https:///release": false,
	} {
		if err := kubeenv.CheckReleaseBase(in); (err == nil) != ok {
			t.Errorf("CheckReleaseBase(%q) = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestValidateHashAndTarballVersion(t *testing.T) {
	t.Parallel()
	tar, err := kubeuptest.ServerTarball("v1.31.0")
	if err != nil {
		t.Fatal(err)
	}
	s1 := sha1.Sum(tar) //nolint:gosec
	cases := []struct {
		name, hash string
		ok         bool
	}{
		{"sha512", kubeenv.SHA512Hex(tar), true},
		{"sha512 upper case", strings.ToUpper(kubeenv.SHA512Hex(tar)), true},
		{"sha1 (older kube-up)", hex.EncodeToString(s1[:]), true},
		{"other file's hash", kubeenv.SHA512Hex([]byte("x")), false},
		{"empty", "", false},
	}
	for _, tc := range cases {
		err := kubeenv.ValidateHash(tar, tc.hash)
		var me *kubeenv.HashMismatchError
		if tc.ok != (err == nil) || (!tc.ok && !errors.As(err, &me)) {
			t.Errorf("%s: ValidateHash = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if v, err := kubeenv.TarballVersion(bytes.NewReader(tar)); err != nil || v != "v1.31.0" {
		t.Errorf("TarballVersion = %q, %v", v, err)
	}
	m, _ := kubeuptest.ManifestsTarball("v1.31.0")
	if _, err := kubeenv.TarballVersion(bytes.NewReader(m)); err == nil || !strings.Contains(err.Error(), "no kubernetes/version") {
		t.Errorf("manifests tarball: %v, want no kubernetes/version", err)
	}
	if _, err := kubeenv.TarballVersion(strings.NewReader("<html>404</html>")); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("not a tarball: %v", err)
	}
}

func TestParseSHA512File(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("ab", 64)
	for in, want := range map[string]string{h: h, h + "\n": h, h + "  kubernetes-server-linux-amd64.tar.gz\n": h, strings.ToUpper(h): h, "": "", "<html>": "", h[:40]: ""} {
		got, err := kubeenv.ParseSHA512File([]byte(in))
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParseSHA512File(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
