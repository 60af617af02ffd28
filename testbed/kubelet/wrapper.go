package kubelet

import (
	"fmt"
	"strings"
)

// WrapperScript is the `kubelet` a test-bed host installs (e.g. as
// /usr/bin/kubelet): it runs program (hamaster-kubelet) with the flags
// kubeadm's systemd drop-in (10-kubeadm.conf) passes, the flags kubeadm
// writes to /var/lib/kubelet/kubeadm-flags.env, $KUBELET_EXTRA_ARGS from
// /etc/default/kubelet, and the stand-in's version and binaries
// directory baked in. A "package upgrade" of the kubelet is writing the
// script again with a new version, then restarting it. Arguments given
// to the script come last (`kubelet --version`).
func WrapperScript(program, version, binDir string) (string, error) {
	if _, err := ParseVersion(version); err != nil {
		return "", fmt.Errorf("kubelet wrapper: %w", err)
	}
	for _, v := range []string{program, binDir} {
		if v == "" || strings.ContainsAny(v, "'\n") {
			return "", fmt.Errorf("kubelet wrapper: path %q cannot be quoted", v)
		}
	}
	return fmt.Sprintf(`#!/bin/sh
# The test bed's kubelet (hamaster-kubelet %[2]s), as kubeadm's unit runs it.
KUBELET_KUBEADM_ARGS=
KUBELET_EXTRA_ARGS=
[ -r /var/lib/kubelet/kubeadm-flags.env ] && . /var/lib/kubelet/kubeadm-flags.env
[ -r /etc/default/kubelet ] && . /etc/default/kubelet
exec '%[1]s' --hamaster-version=%[2]s --hamaster-bin-dir='%[3]s' \
  --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf \
  --config=/var/lib/kubelet/config.yaml $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS "$@"
`, program, version, binDir), nil
}
