package gce_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
)

// TestReleaseURLOption refuses a --gce-release-url that is not an http(s)
// URL of release directories, naming the flag, before any client is made.
func TestReleaseURLOption(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"dl.k8s.io/release", "gs://kubernetes-release/release", "https://dl.k8s.io/release?x=1"} {
		_, err := gce.New(context.Background(), providers.Settings{Cluster: "c", Options: map[string]string{
			gce.OptProject: "p", gce.OptZones: "us-central1-b", remote.OptUser: "u", gce.OptReleaseURL: bad}})
		if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--"+gce.OptReleaseURL) {
			t.Errorf("--%s %q: %v; want InvalidArgument naming the flag", gce.OptReleaseURL, bad, err)
		}
	}
}
