// Package realtier is what the real-apiserver tier's tests share: the
// directory of the real Kubernetes binaries ('make kube-apiserver' builds
// them, 'make test-real' runs the tier with this directory set).
package realtier

import (
	"os"
	"testing"
)

// EnvBinDir names the directory of the real binaries
// (DIR/VERSION/kube-apiserver, kubeadm ...).
const EnvBinDir = "HAMASTER_REAL_APISERVER_DIR"

// BinDir is the real binaries' directory, $HAMASTER_REAL_APISERVER_DIR;
// the test fails, saying how to run the tier, when it is not set.
func BinDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvBinDir)
	if dir == "" {
		t.Fatal(EnvBinDir + " is not set: run the real-apiserver tier with 'make test-real' (it builds the binaries first)")
	}
	return dir
}
