package kubelet

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// ParseVersion parses a Kubernetes release version, vX.Y.Z.
func ParseVersion(s string) (*version.Version, error) {
	if !strings.HasPrefix(s, "v") {
		return nil, fmt.Errorf("version %q: want vX.Y.Z", s)
	}
	v, err := version.ParseSemantic(s)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", s, err)
	}
	return v, nil
}

// VersionLine is what `kubelet --version` prints: kubeadm's preflight
// (KubeletVersionCheck) and upgrade node parse "Kubernetes vX.Y.Z".
func VersionLine(v string) string { return "Kubernetes " + v }
