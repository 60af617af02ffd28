package awstest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// DefaultReleases are the versions the fake's release site publishes:
// what the AWS suite upgrades to (v1.31.0) and the conformance suite's
// recreate (v1.99.9).
var DefaultReleases = []string{"v1.31.0", "v1.99.9"}

// ReleaseSite stands in for dl.k8s.io's release directory: real gzip'd
// server and manifests tarballs holding kubernetes/version, with their
// .sha512 beside them. The operator's side (the provider fetching hashes
// before anything changes) reads it over HTTP; the VPC's masters get the
// tarballs through the plane (VPCPlane.Publish), as a VM reaches the
// internet through its NAT.
type ReleaseSite struct {
	srv   *httptest.Server
	plane *VPCPlane

	mu      sync.Mutex
	objects map[string][]byte // path → content
}

// NewReleaseSite serves the site until the test ends.
func NewReleaseSite(t testing.TB, plane *VPCPlane) *ReleaseSite {
	s := &ReleaseSite{plane: plane, objects: map[string][]byte{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the release directory (the provider's --aws-release-url).
func (s *ReleaseSite) URL() string { return s.srv.URL + "/release" }

// Add publishes version's tarballs and their .sha512 files.
func (s *ReleaseSite) Add(version string) error {
	server, manifests := kubeenv.ReleaseURLs(s.URL(), version)
	st, err := kubeuptest.ServerTarball(version)
	if err != nil {
		return err
	}
	mt, err := kubeuptest.ManifestsTarball(version)
	if err != nil {
		return err
	}
	for u, data := range map[string][]byte{server: st, manifests: mt} {
		if err := s.plane.Publish(u, data); err != nil {
			return err
		}
		path := strings.TrimPrefix(u, s.srv.URL)
		s.mu.Lock()
		s.objects[path] = data
		s.objects[path+".sha512"] = []byte(fmt.Sprintf("%s  %s\n", kubeenv.SHA512Hex(data), path[strings.LastIndex(path, "/")+1:]))
		s.mu.Unlock()
	}
	return nil
}

func (s *ReleaseSite) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	b, ok := s.objects[r.URL.Path]
	s.mu.Unlock()
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write(b)
}
