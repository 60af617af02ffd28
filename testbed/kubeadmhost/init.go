package kubeadmhost

import (
	"fmt"
	"net/netip"
	"strings"
)

// Init describes `kubeadm init` of a host, as an operator runs it.
type Init struct {
	// Version is the ClusterConfiguration's kubernetesVersion; the host
	// must have that version installed (Install).
	Version string
	// ControlPlaneEndpoint, when set (VIP:6443, a cloud's static IP or
	// load balancer), is the ClusterConfiguration's
	// controlPlaneEndpoint, for control-plane joins; empty is the common
	// single master.
	ControlPlaneEndpoint string
	// UploadCerts passes --upload-certs (the certificates for joining
	// control planes, in the kubeadm-certs Secret); CertificateKey is
	// its key (kubeadm's certs.CreateCertificateKey format, 64 hex).
	UploadCerts    bool
	CertificateKey string
}

// InitConfigPath is where the configuration goes on the host (its own
// /run).
const InitConfigPath = "/run/kubeadm-init.yaml"

// InitConfig is the kubeadm configuration for `kubeadm init --config`
// on host name at addr: kubeadm's v1beta4 API
// (cmd/kubeadm/app/apis/kubeadm/v1beta4): InitConfiguration with addr as
// localAPIEndpoint.advertiseAddress and name as nodeRegistration.name
// (the CRI socket: containerd's, which the test bed's kubelet serves),
// ClusterConfiguration with kubernetesVersion and, if given,
// controlPlaneEndpoint.
func InitConfig(name string, addr netip.Addr, k Init) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
nodeRegistration:
  name: %s
  criSocket: unix:///var/run/containerd/containerd.sock
`, addr, name)
	if k.CertificateKey != "" {
		fmt.Fprintf(&b, "certificateKey: %s\n", k.CertificateKey)
	}
	fmt.Fprintf(&b, `---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
`, k.Version)
	if k.ControlPlaneEndpoint != "" {
		fmt.Fprintf(&b, "controlPlaneEndpoint: %s\n", k.ControlPlaneEndpoint)
	}
	return b.String()
}

// InitCommand is the command line that runs `kubeadm init` with the
// configuration at InitConfigPath.
func InitCommand(k Init) string {
	cmd := "kubeadm init --config " + InitConfigPath
	if k.UploadCerts {
		cmd += " --upload-certs"
	}
	return cmd
}
