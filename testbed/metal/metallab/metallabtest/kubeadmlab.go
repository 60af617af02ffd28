package metallabtest

import (
	"context"
	"testing"

	"github.com/hamaster/hamaster/testbed/metal/metallab"
)

// KubeadmOptions are the Options of a lab of hosts kubeadm hosts with the
// binaries of versions (Kubeadm's kubelet and binaries). With more than
// one version (an upgrade's targets after the first), BinDir is a
// LinkBinaries copy of the binaries, in which the test can make a
// release Unstartable.
func KubeadmOptions(t testing.TB, hosts int, versions ...string) metallab.Options {
	t.Helper()
	kubelet, binDir := Kubeadm(t, versions...)
	if len(versions) > 1 {
		binDir = LinkBinaries(t, binDir, versions...)
	}
	return metallab.Options{Hosts: hosts, Kubelet: kubelet, BinDir: binDir}
}

// StartKubeadm is StartWith with kubeadm, the kubelet and the binaries of
// version installed on every host (o as KubeadmOptions makes it).
func StartKubeadm(ctx context.Context, t testing.TB, o metallab.Options, version string, bins ...string) *metallab.Lab {
	t.Helper()
	lab := StartWith(ctx, t, o, bins...)
	for _, h := range lab.Hosts {
		if err := lab.Install(ctx, h, version); err != nil {
			t.Fatal(err)
		}
	}
	return lab
}
