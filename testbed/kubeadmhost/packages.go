package kubeadmhost

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hamaster/hamaster/internal/nodebin"
)

// KubeletProgram is the test bed's kubelet, installed as the host's
// kubelet (Install).
const KubeletProgram = "hamaster-kubelet"

// EnvBinDir names the directory of the real binaries 'make
// kube-apiserver' built (DIR/VERSION/kubeadm ...).
const EnvBinDir = "HAMASTER_REAL_APISERVER_DIR"

// Packages names where a test bed's kubeadm packages come from
// (Install's kubeletProgram and binDir), as a test bed's command line
// takes them.
type Packages struct {
	// Kubelet is hamaster-kubelet's path; KubeletFlag names the setting
	// in errors.
	Kubelet, KubeletFlag string
	// BinDir is the real binaries' directory; BinDirFlag names the
	// setting in errors.
	BinDir, BinDirFlag string
}

// FindPackages fills in p's empty paths and checks them for version:
// Kubelet is hamaster-kubelet next to the running binary (make build puts
// them together), else on $PATH; BinDir is $HAMASTER_REAL_APISERVER_DIR,
// else make kube-apiserver's cache (~/.cache/hamaster/kube-apiserver).
// Both come back absolute.
func FindPackages(p Packages, version string) (Packages, error) {
	k, err := nodebin.Sibling(KubeletProgram, p.Kubelet, p.KubeletFlag)
	if err != nil {
		return p, err
	}
	if p.Kubelet, err = filepath.Abs(k); err != nil {
		return p, fmt.Errorf("%s: %w", p.KubeletFlag, err)
	}
	if p.BinDir == "" {
		p.BinDir = os.Getenv(EnvBinDir)
	}
	if p.BinDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return p, fmt.Errorf("%s: %w", p.BinDirFlag, err)
		}
		p.BinDir = filepath.Join(cache, "hamaster", "kube-apiserver")
	}
	if p.BinDir, err = filepath.Abs(p.BinDir); err != nil {
		return p, fmt.Errorf("%s: %w", p.BinDirFlag, err)
	}
	for _, b := range []string{"kubeadm", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(p.BinDir, version, b)); err != nil {
			return p, fmt.Errorf("%s: %s %s is not in %s (make kube-apiserver builds the pinned versions)", p.BinDirFlag, b, version, p.BinDir)
		}
	}
	return p, nil
}
