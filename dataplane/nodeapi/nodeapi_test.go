package nodeapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
)

// TestPinnedKubeVersionsMatchTools keeps the versions hamaster defaults to
// equal to the ones tools/kube-apiserver builds.
func TestPinnedKubeVersionsMatchTools(t *testing.T) {
	t.Parallel()
	mods, err := filepath.Glob("../../tools/kube-apiserver/v1.*/go.mod")
	if err != nil || len(mods) == 0 {
		t.Fatalf("tools/kube-apiserver/v1.*/go.mod: %v (found %d)", err, len(mods))
	}
	re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v[0-9.]+)`)
	var pinned []string
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		got := re.FindSubmatch(b)
		if got == nil {
			t.Fatalf("%s pins no k8s.io/kubernetes", m)
		}
		pinned = append(pinned, string(got[1]))
	}
	slices.SortFunc(pinned, func(a, b string) int {
		c, err := utilversion.MustParseSemantic(a).Compare(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	if want := nodeapi.PinnedKubeVersions(); !slices.Equal(pinned, want) {
		t.Fatalf("tools/kube-apiserver pins %v, nodeapi.PinnedKubeVersions() = %v", pinned, want)
	}
	if got := nodeapi.NewestPinnedKubeVersion(); got != pinned[len(pinned)-1] {
		t.Fatalf("NewestPinnedKubeVersion() = %s, want %s", got, pinned[len(pinned)-1])
	}
}
