package gcefake

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/kubeenv"
)

// TestReleaseMirror checks what the mirror serves as a release site does:
// the tarballs (holding kubernetes/version) and their .sha512, a 404 for a
// version it lacks, uploads, and which URLs a VM can download.
func TestReleaseMirror(t *testing.T) {
	t.Parallel()
	s, err := New(Options{Subnet: 247, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AddRelease("v1.31.0", ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRelease("v1.31.1", ReleaseOptions{BadServerHash: true}); err != nil {
		t.Fatal(err)
	}
	get := func(url string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, tc := range []struct {
		version   string
		hashMatch bool
	}{{"v1.31.0", true}, {"v1.31.1", false}} {
		server, manifests := kubeenv.ReleaseURLs(s.ReleaseURL(), tc.version)
		code, tar := get(server)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", server, code)
		}
		if v, err := kubeenv.TarballVersion(bytes.NewReader(tar)); err != nil || v != tc.version {
			t.Errorf("%s holds version %q, %v", server, v, err)
		}
		_, sum := get(server + ".sha512")
		h, err := kubeenv.ParseSHA512File(sum)
		if err != nil {
			t.Fatal(err)
		}
		if (kubeenv.ValidateHash(tar, h) == nil) != tc.hashMatch {
			t.Errorf("%s: published hash matches: %v, want %v", tc.version, !tc.hashMatch, tc.hashMatch)
		}
		_, mt := get(manifests)
		_, msum := get(manifests + ".sha512")
		if h, _ := kubeenv.ParseSHA512File(msum); kubeenv.ValidateHash(mt, h) != nil {
			t.Errorf("%s: manifests hash does not match", tc.version)
		}
		if f, ok := s.downloadFile(server); !ok || !strings.HasSuffix(f, "/"+tc.version+"/"+kubeenv.ServerTarName) {
			t.Errorf("downloadFile(%s) = %q, %v", server, f, ok)
		}
	}
	if code, body := get(s.ReleaseURL() + "/v1.31.7/" + kubeenv.ServerTarName + ".sha512"); code != http.StatusNotFound || !bytes.Contains(body, []byte("NoSuchKey")) {
		t.Errorf("a version the mirror lacks: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPut, s.StorageURL()+"/kubernetes-staging-1/kubernetes-devel/x.tar.gz", strings.NewReader("devel"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %v %v", resp, err)
	}
	if code, body := get(s.StorageURL() + "/kubernetes-staging-1/kubernetes-devel/x.tar.gz"); code != http.StatusOK || string(body) != "devel" {
		t.Errorf("uploaded object: %d %q", code, body)
	}
	if _, ok := s.downloadFile("https://storage.googleapis.com/kubernetes-staging-1/kubernetes-devel/x.tar.gz"); !ok {
		t.Error("a VM cannot download the staging bucket's object at its Cloud Storage URL")
	}
	for _, u := range []string{"https://dl.k8s.io/release/v1.31.0/" + kubeenv.ServerTarName, "https://storage.googleapis.com/../etc/passwd", ""} {
		if f, ok := s.downloadFile(u); ok {
			t.Errorf("downloadFile(%q) = %q: want no route", u, f)
		}
	}
	if code, _ := get(s.StorageURL() + "/b/../../etc/passwd"); code == http.StatusOK {
		t.Error("path traversal served")
	}
}
