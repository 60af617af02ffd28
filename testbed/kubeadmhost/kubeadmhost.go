// Package kubeadmhost makes a test bed's machine a kubeadm host, the part
// the metal lab's hosts (testbed/metal/metallab) and the GCE fake's VMs
// built from a kubeadm image (testbed/gce/gcefake) share:
//
//   - a mount namespace per host with its own /etc/kubernetes,
//     /var/lib/etcd, /var/lib/kubelet, /var/lib/hamaster, /run and
//     /usr/local/bin (Mounts, HostScript), so that kubeadm runs with its
//     default paths and never writes the machine's own; the mount points
//     the machine lacks are created under a machine-wide lock and removed
//     by whichever test bed ends last (LockMounts, EnsureMountPoints,
//     ReleaseMountPoints);
//   - "the packages": kubeadm, kubectl and the test bed's kubelet in the
//     host's /usr/local/bin, as kubeadm's "Installing kubeadm, kubelet and
//     kubectl" page has an operator install them (Install);
//   - the kubelet service, supervised as systemd supervises kubeadm's
//     kubelet.service (Service, KubeletArgv).
//
// It needs root, util-linux's unshare and nsenter.
package kubeadmhost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hamaster/hamaster/testbed/kubelet"
)

// Unshare is util-linux's unshare, which starts a host's mount and UTS
// namespaces.
const Unshare = "unshare"

// DefaultKubeletRestartDelay is the kubelet service's restart delay:
// kubeadm's kubelet.service has Restart=always, RestartSec=10
// (kubernetes/release cmd/krel/templates/latest/kubelet/kubelet.service),
// scaled down for the test beds.
const DefaultKubeletRestartDelay = time.Second

// KubeletStopWait bounds a kubelet service's stop (SIGTERM: the stand-in
// stops its pods, etcd last) before SIGKILL (its pods die with it: they
// are its children with Pdeathsig). Short: an apiserver's graceful stop
// can take its whole 30 s grace period, which a test bed being torn down
// has no use for.
const KubeletStopWait = 5 * time.Second

// Mounts are the directories each host has its own copy of: what kubeadm
// and the kubelet write, what hamaster's metal provider writes (its claim
// on a host, providers/metal.Claim), /run for pid files and the CRI
// socket, /usr/local/bin, where Install puts the host's kubeadm,
// kubectl and kubelet ("the packages"), and /var/log/pods, where the
// kubelet writes its pods' logs (the kubeadm flavor's upgrade reads its
// kube-apiserver's there: one host's must not be another's, nor the
// machine's); /etc/systemd/system, where hamaster writes the VIP's units
// on a metal master (the metal lab's systemctl stand-in reads them).
func Mounts() []string {
	return []string{"/etc/kubernetes", "/var/lib/etcd", "/var/lib/kubelet", "/var/lib/hamaster", "/run", "/usr/local/bin", "/var/log/pods", "/etc/systemd/system"}
}

// MountSource is the directory under hostDir that a host mounts over
// mount point m: m with '/' as '-' (/etc/kubernetes → etc-kubernetes).
func MountSource(hostDir, m string) string {
	return filepath.Join(hostDir, strings.ReplaceAll(strings.TrimPrefix(m, "/"), "/", "-"))
}

// HostArgs are the arguments after HostScript for a host called name
// whose directories live under hostDir (created here, /run/sshd among
// them: sshd run as root chroots into it), /etc/hosts replaced by
// hostsFile unless it is "", running sshd with its configuration
// sshdConfig in the foreground.
func HostArgs(name, hostDir, hostsFile, sshd, sshdConfig string) ([]string, error) {
	args := []string{name, hostsFile, sshd, sshdConfig}
	for _, m := range Mounts() {
		src := MountSource(hostDir, m)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, fmt.Errorf("kubeadmhost: %s: %w", name, err)
		}
		args = append(args, src, m)
	}
	if err := os.MkdirAll(filepath.Join(MountSource(hostDir, "/run"), "sshd"), 0o755); err != nil {
		return nil, fmt.Errorf("kubeadmhost: %s: %w", name, err)
	}
	return args, nil
}

// HostScript runs inside the host's network namespace, in a mount and
// UTS namespace of its own (unshare --mount --uts --propagation
// private), as root: the hostname, the host prepared as kubeadm's
// "Installing kubeadm" page asks of a machine (net.ipv4.ip_forward=1,
// the host's own in its network namespace; the cgroup filesystems
// mounted: ip netns exec remounted /sys, which lost the machine's, and
// kubeadm's preflight SystemVerification reads them), the host's own
// directories over the machine's, then sshd in the foreground. Its
// arguments are HostArgs'.
const HostScript = `set -e
echo "$1" > /proc/sys/kernel/hostname
echo 1 > /proc/sys/net/ipv4/ip_forward
grep " /sys/fs/cgroup" /proc/1/mounts | while read src tgt type opts rest; do
  mkdir -p "$tgt"
  case $type in cgroup) o=$(echo "$opts" | sed "s/name=/none,name=/");; *) o=$opts;; esac
  mount -t "$type" -o "$o" "$src" "$tgt"
done
h=$2; sshd=$3; c=$4; shift 4
[ -z "$h" ] || mount --bind "$h" /etc/hosts
while [ $# -gt 0 ]; do mount --bind "$1" "$2"; shift 2; done
exec "$sshd" -D -e -f "$c"
`

// UnshareArgs is the command (after `ip netns exec NS`) that starts a
// host: unshare, then HostScript with args (HostArgs).
func UnshareArgs(label string, args []string) []string {
	return append([]string{Unshare, "--mount", "--uts", "--propagation", "private", "sh", "-c", HostScript, label}, args...)
}

// Install "installs the packages" into usrLocalBin, the host's own
// /usr/local/bin (MountSource(hostDir, "/usr/local/bin")), as kubeadm's
// "Installing kubeadm, kubelet and kubectl" page has an operator do
// (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/):
// kubeadm and kubectl of version (symlinks to binDir/<version>/) and the
// kubelet (kubelet.WrapperScript around kubeletProgram, reporting
// version). Installing again (another version) replaces the three: a
// package upgrade; the caller restarts the kubelet service.
func Install(usrLocalBin, kubeletProgram, binDir, version string) error {
	if kubeletProgram == "" || binDir == "" {
		return errors.New("kubeadmhost: install: the kubelet program (hamaster-kubelet) and the real binaries' directory are required")
	}
	if _, err := os.Stat(kubeletProgram); err != nil {
		return fmt.Errorf("kubeadmhost: install: the kubelet program: %w", err)
	}
	for _, b := range []string{"kubeadm", "kubectl"} {
		src := filepath.Join(binDir, version, b)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("kubeadmhost: install %s %s: %w (make kube-apiserver builds it)", b, version, err)
		}
		tmp := filepath.Join(usrLocalBin, "."+b+".new")
		_ = os.Remove(tmp)
		if err := os.Symlink(src, tmp); err != nil {
			return fmt.Errorf("kubeadmhost: install %s: %w", b, err)
		}
		if err := os.Rename(tmp, filepath.Join(usrLocalBin, b)); err != nil {
			return fmt.Errorf("kubeadmhost: install %s: %w", b, err)
		}
	}
	script, err := kubelet.WrapperScript(kubeletProgram, version, binDir)
	if err != nil {
		return fmt.Errorf("kubeadmhost: install the kubelet: %w", err)
	}
	p := filepath.Join(usrLocalBin, "kubelet")
	if err := os.WriteFile(p+".tmp", []byte(script), 0o755); err != nil {
		return fmt.Errorf("kubeadmhost: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("kubeadmhost: %w", err)
	}
	return nil
}

// KubeletArgv runs the host's /usr/local/bin/kubelet in the namespaces
// of process pid (the host's sshd): network, mount (its own
// /etc/kubernetes, /var/lib/*, /run, /usr/local/bin, cgroups) and UTS
// (its hostname).
func KubeletArgv(pid int) []string {
	return []string{"nsenter", "-t", fmt.Sprint(pid), "-n", "-m", "-u", "--", "/usr/local/bin/kubelet"}
}
