package metallab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/kubelet"
)

// DefaultKubeletRestartDelay is the kubelet service's restart delay
// (kubeadmhost.DefaultKubeletRestartDelay).
const DefaultKubeletRestartDelay = kubeadmhost.DefaultKubeletRestartDelay

// Install "installs the packages" on host h as kubeadm's "Installing
// kubeadm, kubelet and kubectl" page has an operator do
// (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/):
// kubeadm and kubectl of version (symlinks to Options.BinDir/<version>/)
// and the kubelet (kubelet.WrapperScript around Options.Kubelet,
// reporting version) into the host's own /usr/local/bin, then (re)starts
// the host's kubelet service, as the package's postinst and systemd do:
// restarted RestartSec after it exits (Restart=always), stopped by Close.
// Installing again (another version) replaces the three and restarts
// the kubelet: a package upgrade.
func (l *Lab) Install(ctx context.Context, h *Host, version string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.opts.Kubelet == "" || l.opts.BinDir == "" {
		return errors.New("metallab: install: Options.Kubelet (hamaster-kubelet) and Options.BinDir (the real binaries) are required")
	}
	if err := kubeadmhost.Install(kubeadmhost.MountSource(h.Dir, "/usr/local/bin"), l.opts.Kubelet, l.opts.BinDir, version); err != nil {
		return fmt.Errorf("metallab: install on %s: %w", h.Name, err)
	}
	if err := l.writePackageInstaller(kubeadmhost.MountSource(h.Dir, "/usr/local/bin")); err != nil {
		return fmt.Errorf("metallab: install on %s: %w", h.Name, err)
	}
	l.log.Info("installed kubeadm, kubectl and the kubelet", "host", h.Name, "version", version)
	if h.kubelet == nil {
		h.kubelet = kubeadmhost.StartService(h.Name+"/kubelet", kubeadmhost.KubeletArgv(h.sshd.Process.Pid),
			filepath.Join(h.Dir, "kubelet.log"), l.opts.KubeletRestartDelay, l.log)
		return nil
	}
	h.kubelet.Restart()
	return nil
}

// InstallCommand is the command, in the form of the kubeadm flavor's
// install option (flavors/kubeadm UpgradeOptions.InstallCommand:
// {version} and {packages} are replaced), that "installs the packages"
// on a lab host: the lab's stand-in for the apt-get commands of
// kubeadm's upgrade page. hamaster.env names it
// (HAMASTER_KUBEADM_INSTALL_COMMAND).
const InstallCommand = PackageInstaller + " {version} {packages}"

// RestartKubeletCommand is the lab's stand-in for `systemctl restart
// kubelet` on a host, in the form of the kubeadm flavor's option
// (HAMASTER_KUBEADM_RESTART_KUBELET_COMMAND, which hamaster.env sets):
// the host's kubelet (the process in the host's own mount namespace)
// gets SIGTERM, and the lab's service supervisor starts it again
// (Restart=always). The hosts run no systemd.
const RestartKubeletCommand = `pkill -TERM --ns $$ --nslist mnt -f "^[^ ]*hamaster-kubelet --hamaster-version"`

// IgnorePreflightErrors are the kubeadm upgrade checks the lab's hosts
// cannot pass: CreateJob (kubeadm upgrade's health check runs a Job,
// and the test bed's kubelet runs static pods only). hamaster.env names
// them (HAMASTER_KUBEADM_IGNORE_PREFLIGHT_ERRORS).
const IgnorePreflightErrors = "CreateJob"

// PackageInstaller is the script Install writes into each host's
// /usr/local/bin: `hamaster-lab-install VERSION PACKAGE...` switches the
// host's kubeadm, kubectl or kubelet to VERSION's (a directory of
// Options.BinDir), as Install does, without restarting the kubelet (the
// operator's `systemctl restart kubelet` does that).
const PackageInstaller = "hamaster-lab-install"

// installerScript is PackageInstaller; %[1]s is Options.BinDir.
const installerScript = `#!/bin/sh
# metallab's stand-in for the operator's package install (apt-get install
# kubeadm='1.34.4-*' ...): switches this host's /usr/local/bin/PACKAGE to
# VERSION's build. Usage: ` + PackageInstaller + ` VERSION PACKAGE...
set -e
v=$1; shift
case $v in v[0-9]*) ;; *) echo "` + PackageInstaller + `: version $v: want vX.Y.Z" >&2; exit 2;; esac
[ -d '%[1]s'/"$v" ] || { echo "` + PackageInstaller + `: no packages of $v (%[1]s/$v)" >&2; exit 100; }
for p in "$@"; do
  case $p in
  kubeadm|kubectl)
    ln -sfn '%[1]s'/"$v"/$p /usr/local/bin/.$p.new
    mv -Tf /usr/local/bin/.$p.new /usr/local/bin/$p;;
  kubelet)
    [ -f /usr/local/bin/.kubelet-"$v" ] || { echo "` + PackageInstaller + `: no kubelet of $v" >&2; exit 100; }
    cp /usr/local/bin/.kubelet-"$v" /usr/local/bin/.kubelet.new
    mv -Tf /usr/local/bin/.kubelet.new /usr/local/bin/kubelet;;
  *) echo "` + PackageInstaller + `: unknown package $p (kubeadm, kubelet, kubectl)" >&2; exit 2;;
  esac
done
`

// writePackageInstaller writes PackageInstaller into the host's
// /usr/local/bin (dst), with the kubelet wrapper of every version
// Options.BinDir holds beside it (.kubelet-<version>).
func (l *Lab) writePackageInstaller(dst string) error {
	if strings.ContainsAny(l.opts.BinDir, "'\n") {
		return fmt.Errorf("binary directory %q cannot be quoted", l.opts.BinDir)
	}
	ents, err := os.ReadDir(l.opts.BinDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if _, err := kubelet.ParseVersion(e.Name()); err != nil {
			continue
		}
		w, err := kubelet.WrapperScript(l.opts.Kubelet, e.Name(), l.opts.BinDir)
		if err != nil {
			return err
		}
		if err := writeAtomic(filepath.Join(dst, ".kubelet-"+e.Name()), []byte(w), 0o755); err != nil {
			return err
		}
	}
	return writeAtomic(filepath.Join(dst, PackageInstaller), []byte(fmt.Sprintf(installerScript, l.opts.BinDir)), 0o755)
}

// RestartKubelet restarts h's kubelet service at once, as `systemctl
// restart kubelet` does on a real host; a host without the service
// (never installed, or stopped) is an error.
func (l *Lab) RestartKubelet(h *Host) error {
	if h.kubelet == nil {
		return fmt.Errorf("metallab: %s has no kubelet service (Install starts it)", h.Name)
	}
	h.kubelet.Restart()
	return nil
}

// KubeadmInit describes `kubeadm init` of a host (kubeadmhost.Init).
type KubeadmInit = kubeadmhost.Init

// InitConfig is the kubeadm configuration KubeadmInit passes to
// `kubeadm init --config` (kubeadmhost.InitConfig for the host's name and
// address).
func InitConfig(h *Host, k KubeadmInit) string {
	return kubeadmhost.InitConfig(h.Name, h.Addr, k)
}

// InitConfigPath is where KubeadmInit puts the configuration on the
// host (its own /run).
const InitConfigPath = kubeadmhost.InitConfigPath

// KubeadmInitLog is the host's file (under Host.Dir) that gets kubeadm
// init's output.
const KubeadmInitLog = "kubeadm-init.log"

// KubeadmInit runs the real `kubeadm init --config` on h over SSH, as an
// operator would, no preflight check ignored; its output goes to
// <h.Dir>/kubeadm-init.log. It then copies the host's
// /etc/kubernetes/admin.conf to Lab.AdminConfFile (its server is the
// host's address, or the control-plane endpoint) and returns how long
// init took. The host needs the version installed (Install).
func (l *Lab) KubeadmInit(ctx context.Context, h *Host, k KubeadmInit) (time.Duration, error) {
	c, err := l.Dial(ctx, h)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.Upload(ctx, InitConfigPath, []byte(InitConfig(h, k)), 0o600); err != nil {
		return 0, fmt.Errorf("metallab: kubeadm config on %s: %w", h.Name, err)
	}
	logPath := filepath.Join(h.Dir, KubeadmInitLog)
	cmd := kubeadmhost.InitCommand(k)
	l.log.Info("kubeadm init", "host", h.Name, "version", k.Version, "control_plane_endpoint", k.ControlPlaneEndpoint, "log", logPath)
	start := time.Now()
	// The log is the lab's file, which the host sees at the same path.
	_, stderr, err := c.Run(ctx, fmt.Sprintf("%s > '%s' 2>&1", cmd, logPath))
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("metallab: %s on %s (%s): %w: %s; its output: %s", cmd, h.Name, took.Round(time.Second), err, stderr, logTail(logPath))
	}
	l.log.Info("kubeadm init done", "host", h.Name, "took", took.Round(time.Millisecond))
	out, stderr, err := c.Run(ctx, "cat /etc/kubernetes/admin.conf")
	if err != nil {
		return took, fmt.Errorf("metallab: admin.conf of %s: %w: %s", h.Name, err, stderr)
	}
	if err := writeAtomic(l.AdminConfFile, out, 0o600); err != nil {
		return took, err
	}
	// hamaster.env gets KUBECONFIG.
	return took, l.writeFiles()
}

// KubeadmJoinWorkerLog is the host's file (under Host.Dir) that gets
// kubeadm join's output.
const KubeadmJoinWorkerLog = "kubeadm-join.log"

// KubeadmJoinWorker joins h to master's cluster as a worker, the way
// kubeadm's docs have an operator do it: `kubeadm token create
// --print-join-command` on the master, that command run on h, over SSH,
// no preflight check ignored; its output goes to
// <h.Dir>/kubeadm-join.log. The worker's kubelet (Install) then does the
// TLS bootstrap on the server cluster-info names. h needs the version
// installed.
func (l *Lab) KubeadmJoinWorker(ctx context.Context, h, master *Host) (time.Duration, error) {
	mc, err := l.Dial(ctx, master)
	if err != nil {
		return 0, err
	}
	defer mc.Close()
	join, stderr, err := mc.Run(ctx, "kubeadm token create --print-join-command")
	if err != nil {
		return 0, fmt.Errorf("metallab: kubeadm token create on %s: %w: %s", master.Name, err, stderr)
	}
	cmd := strings.TrimSpace(string(join))
	if !strings.HasPrefix(cmd, "kubeadm join ") {
		return 0, fmt.Errorf("metallab: kubeadm token create on %s printed %q, want a kubeadm join command", master.Name, cmd)
	}
	c, err := l.Dial(ctx, h)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	logPath := filepath.Join(h.Dir, KubeadmJoinWorkerLog)
	l.log.Info("kubeadm join (worker)", "host", h.Name, "master", master.Name, "log", logPath)
	start := time.Now()
	_, stderr, err = c.Run(ctx, fmt.Sprintf("%s > '%s' 2>&1", cmd, logPath))
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("metallab: kubeadm join of %s (%s): %w: %s; its output: %s", h.Name, took.Round(time.Second), err, stderr, logTail(logPath))
	}
	l.log.Info("kubeadm join (worker) done", "host", h.Name, "took", took.Round(time.Millisecond))
	return took, nil
}

// APIServer is the address kubeadm init gives admin.conf: the control
// plane endpoint, else the host's advertise address, port 6443.
func APIServer(h *Host, controlPlaneEndpoint string) string {
	if controlPlaneEndpoint != "" {
		return "https://" + controlPlaneEndpoint
	}
	return "https://" + net.JoinHostPort(h.Addr.String(), "6443")
}

// VIPEndpoint is the lab's VIP with the apiserver's port.
func (l *Lab) VIPEndpoint() string {
	return netip.AddrPortFrom(l.VIP, 6443).String()
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimSpace(string(b))
}

// StopKubelet stops h's kubelet service and waits for it (its pods stop
// with it), as `systemctl stop kubelet` on a real host: what kubeadm
// reset asks the operator to make sure of when it finds no init system
// it can drive ("Please ensure kubelet is stopped manually";
// cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go). A host without the
// service is left as it is.
func (l *Lab) StopKubelet(h *Host) {
	if h.kubelet != nil {
		h.kubelet.Close(kubeadmhost.KubeletStopWait)
		h.kubelet = nil
	}
}
