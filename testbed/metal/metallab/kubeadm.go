package metallab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/kubelet"
)

// DefaultKubeletRestartDelay is the kubelet service's restart delay:
// kubeadm's kubelet.service has Restart=always, RestartSec=10
// (kubernetes/release cmd/krel/templates/latest/kubelet/kubelet.service),
// scaled down for the test bed.
const DefaultKubeletRestartDelay = time.Second

// kubeletStopWait bounds a kubelet service's stop (SIGTERM: the
// stand-in stops its pods, etcd last) before SIGKILL (its pods die with
// it: they are its children with Pdeathsig). Short: an apiserver's
// graceful stop can take its whole 30 s grace period, which a lab being
// torn down has no use for.
const kubeletStopWait = 5 * time.Second

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
	if _, err := os.Stat(l.opts.Kubelet); err != nil {
		return fmt.Errorf("metallab: install on %s: the kubelet program: %w", h.Name, err)
	}
	dst := filepath.Join(h.Dir, "usr-local-bin")
	for _, b := range []string{"kubeadm", "kubectl"} {
		src := filepath.Join(l.opts.BinDir, version, b)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("metallab: install %s %s on %s: %w (make kube-apiserver builds it)", b, version, h.Name, err)
		}
		tmp := filepath.Join(dst, "."+b+".new")
		_ = os.Remove(tmp)
		if err := os.Symlink(src, tmp); err != nil {
			return fmt.Errorf("metallab: install %s on %s: %w", b, h.Name, err)
		}
		if err := os.Rename(tmp, filepath.Join(dst, b)); err != nil {
			return fmt.Errorf("metallab: install %s on %s: %w", b, h.Name, err)
		}
	}
	script, err := kubelet.WrapperScript(l.opts.Kubelet, version, l.opts.BinDir)
	if err != nil {
		return fmt.Errorf("metallab: install the kubelet on %s: %w", h.Name, err)
	}
	if err := writeAtomic(filepath.Join(dst, "kubelet"), []byte(script), 0o755); err != nil {
		return err
	}
	if err := l.writePackageInstaller(dst); err != nil {
		return fmt.Errorf("metallab: install on %s: %w", h.Name, err)
	}
	l.log.Info("installed kubeadm, kubectl and the kubelet", "host", h.Name, "version", version)
	if h.kubelet == nil {
		h.kubelet = &service{
			name: h.Name + "/kubelet",
			// The host's namespaces, those of its sshd: network, mount
			// (its own /etc/kubernetes, /var/lib/*, /run, /usr/local/bin,
			// cgroups) and UTS (its hostname).
			argv:    []string{"nsenter", "-t", fmt.Sprint(h.sshd.Process.Pid), "-n", "-m", "-u", "--", "/usr/local/bin/kubelet"},
			logPath: filepath.Join(h.Dir, "kubelet.log"),
			delay:   l.opts.KubeletRestartDelay,
			log:     l.log,
			kick:    make(chan struct{}, 1),
			stop:    make(chan struct{}),
			done:    make(chan struct{}),
		}
		go h.kubelet.run()
		return nil
	}
	h.kubelet.restart()
	return nil
}

// InstallCommand is the command, in the form of the kubeadm flavor's
// install option (flavors/kubeadm UpgradeOptions.InstallCommand:
// {version} and {packages} are replaced), that "installs the packages"
// on a lab host: the lab's stand-in for the apt-get commands of
// kubeadm's upgrade page. hamaster.env names it
// (HAMASTER_KUBEADM_INSTALL_COMMAND).
const InstallCommand = PackageInstaller + " {version} {packages}"

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
	h.kubelet.restart()
	return nil
}

// service is a process supervised as systemd supervises a unit with
// Restart=always: started again delay after it exits, at once on restart.
type service struct {
	name    string
	argv    []string
	logPath string
	delay   time.Duration
	log     *slog.Logger

	kick chan struct{} // restart now
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	proc      *os.Process
	immediate bool
	stopping  bool
	starts    int
}

func (s *service) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.starts++
		s.mu.Unlock()
		s.runOnce()
		s.mu.Lock()
		s.proc = nil
		stopping, immediate := s.stopping, s.immediate
		s.immediate = false
		s.mu.Unlock()
		if stopping {
			return
		}
		if immediate {
			continue
		}
		t := time.NewTimer(s.delay)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-s.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

func (s *service) runOnce() {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		s.log.Error("service log", "service", s.name, "err", err)
		return
	}
	defer logf.Close()
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	// The lab killed without its teardown takes the kubelet (and so its
	// pods) with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	err = cmd.Start()
	if err == nil {
		s.proc = cmd.Process
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Error("service start", "service", s.name, "err", err)
		return
	}
	s.log.Debug("service started", "service", s.name, "pid", cmd.Process.Pid)
	err = cmd.Wait()
	s.log.Debug("service exited", "service", s.name, "err", err)
}

// restart stops the running process (SIGTERM) and starts it again at
// once (systemctl restart).
func (s *service) restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.immediate = true
	if s.proc != nil {
		_ = s.proc.Signal(syscall.SIGTERM)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// close stops the service: SIGTERM, SIGKILL after wait.
func (s *service) close(wait time.Duration) {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
	}
	if s.proc != nil {
		_ = s.proc.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.done:
		return
	case <-t.C:
	}
	s.mu.Lock()
	if s.proc != nil {
		s.log.Warn("service did not stop; killing it", "service", s.name, "after", wait)
		_ = s.proc.Kill()
	}
	s.mu.Unlock()
	<-s.done
}

// KubeadmInit describes `kubeadm init` of a host.
type KubeadmInit struct {
	// Version is the ClusterConfiguration's kubernetesVersion; the host
	// must have that version installed (Install).
	Version string
	// ControlPlaneEndpoint, when set (VIP:6443), is the
	// ClusterConfiguration's controlPlaneEndpoint, for control-plane
	// joins; empty is the common single master.
	ControlPlaneEndpoint string
	// UploadCerts passes --upload-certs (the certificates for joining
	// control planes, in the kubeadm-certs Secret); CertificateKey is
	// its key (kubeadm's certs.CreateCertificateKey format, 64 hex).
	UploadCerts    bool
	CertificateKey string
}

// InitConfig is the kubeadm configuration KubeadmInit passes to
// `kubeadm init --config`: kubeadm's v1beta4 API
// (cmd/kubeadm/app/apis/kubeadm/v1beta4): InitConfiguration with the
// host's address as localAPIEndpoint.advertiseAddress and its name as
// nodeRegistration.name (the CRI socket: containerd's, which the
// kubelet serves), ClusterConfiguration with kubernetesVersion and, if
// given, controlPlaneEndpoint.
func InitConfig(h *Host, k KubeadmInit) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
nodeRegistration:
  name: %s
  criSocket: unix:///var/run/containerd/containerd.sock
`, h.Addr, h.Name)
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

// InitConfigPath is where KubeadmInit puts the configuration on the
// host (its own /run).
const InitConfigPath = "/run/kubeadm-init.yaml"

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
	cmd := "kubeadm init --config " + InitConfigPath
	if k.UploadCerts {
		cmd += " --upload-certs"
	}
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
		h.kubelet.close(kubeletStopWait)
		h.kubelet = nil
	}
}
