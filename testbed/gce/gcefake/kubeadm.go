package gcefake

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
)

// KubeadmOptions model images with kubeadm installed, as an operator
// bakes one for kubeadm masters on GCE (kubeadm's "Installing kubeadm,
// kubelet and kubectl" page run at image build time; Cluster API's
// image-builder builds such GCE images): a VM whose boot disk comes from
// one of Images is a kubeadm host. It has the test bed's kubelet
// (hamaster-kubelet) as its kubelet service, supervised as systemd
// supervises kubeadm's kubelet.service, and kubeadm and kubectl of the
// image's version in /usr/local/bin; its sshd, every session and the
// kubelet run in a mount and UTS namespace of the VM's own
// (testbed/kubeadmhost) with its own /etc/kubernetes, /var/lib/etcd,
// /var/lib/kubelet, /run and /usr/local/bin, so kubeadm runs with its
// default paths and never touches the machine's. Nothing is initialised:
// the operator runs kubeadm init (or join) over SSH.
type KubeadmOptions struct {
	// Images maps an image's name (the last element of the boot disk's
	// sourceImage, e.g. "ubuntu-2404-kubeadm-v1-33-13") to the version
	// of the packages it holds (v1.33.13).
	Images map[string]string
	// Kubelet is the hamaster-kubelet program; BinDir holds
	// <version>/{kubeadm,kubectl,kube-apiserver,...} (make kube-apiserver).
	Kubelet, BinDir string
	// KubeletRestartDelay is the kubelet service's RestartSec, scaled
	// down (0: kubeadmhost.DefaultKubeletRestartDelay).
	KubeletRestartDelay time.Duration
}

// kubeadmVersion is the version of the kubeadm image instance in boots
// from, "" when its boot disk is not from one. Called with s.mu held.
func (s *Server) kubeadmVersion(in map[string]any) string {
	if s.o.VPC == nil || s.o.VPC.Kubeadm == nil {
		return ""
	}
	for _, d := range list(in, "disks") {
		if b, _ := obj(d)["boot"].(bool); !b {
			continue
		}
		if disk := s.findByLink(str(obj(d), "source")); disk != nil {
			return s.o.VPC.Kubeadm.Images[lastSeg(str(disk, "sourceImage"))]
		}
	}
	return ""
}

// hostDir holds a kubeadm VM's own directories (kubeadmhost.MountSource):
// its boot disk, removed with the instance.
func (x *vpcVM) hostDir() string { return filepath.Join(x.dir, "host") }

// kubeadmCA is the VM's kubeadm cluster CA file (its
// /etc/kubernetes/pki/ca.crt, which every apiserver certificate kubeadm
// issues chains to, its "kubernetes" name among the SANs), "" until
// kubeadm init or join wrote it.
func (x *vpcVM) kubeadmCA() string {
	p := filepath.Join(kubeadmhost.MountSource(x.hostDir(), "/etc/kubernetes"), "pki", "ca.crt")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// KubeletLog is the kubelet service's log of a kubeadm VM (its journal).
func (s *Server) KubeletLog(zone, instance string) string {
	b, _ := os.ReadFile(filepath.Join(s.instDir("zones/"+zone+"/instances/"+instance), "kubelet.log"))
	return string(b)
}

// sshdCommand is how a VM's sshd starts: sshd itself, or for a kubeadm
// VM sshd in the VM's own mount and UTS namespaces (kubeadmhost), its
// /etc/hosts the VPC's.
func (s *Server) sshdCommand(x *vpcVM, cfg string) (string, []string, *apiError) {
	if x.kubeadm == "" {
		return s.sshd(), []string{"-D", "-e", "-f", cfg}, nil
	}
	args, err := kubeadmhost.HostArgs(x.name, x.hostDir(), "", s.sshd(), cfg)
	if err != nil {
		return "", nil, errf(500, "internalError", "%v", err)
	}
	argv := kubeadmhost.UnshareArgs("gcefake-"+x.name, args)
	return argv[0], argv[1:], nil
}

// installKubeadm "installs the packages" of the VM's image and starts
// its kubelet service in the sshd's namespaces.
func (s *Server) installKubeadm(x *vpcVM) *apiError {
	k := s.o.VPC.Kubeadm
	if err := kubeadmhost.Install(kubeadmhost.MountSource(x.hostDir(), "/usr/local/bin"), k.Kubelet, k.BinDir, x.kubeadm); err != nil {
		return errf(500, "internalError", "instance %s: %v", x.name, err)
	}
	svc := kubeadmhost.StartService(x.name+"/kubelet", kubeadmhost.KubeletArgv(x.sshd.Pid()), filepath.Join(x.dir, "kubelet.log"),
		k.KubeletRestartDelay, s.o.Logger)
	s.mu.Lock()
	x.kubelet = svc
	s.mu.Unlock()
	return nil
}

// StopKubelet stops a kubeadm VM's kubelet service and waits for it (its
// pods stop with it), as `systemctl stop kubelet` on the VM: what kubeadm
// reset asks the operator to make sure of when it finds no init system
// it can drive (cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go). It
// reports whether the VM had one running.
func (s *Server) StopKubelet(zone, instance string) bool {
	s.mu.Lock()
	x := s.vms["zones/"+zone+"/instances/"+instance]
	var svc *kubeadmhost.Service
	if x != nil {
		svc, x.kubelet = x.kubelet, nil
	}
	s.mu.Unlock()
	if svc == nil {
		return false
	}
	svc.Close(kubeadmhost.KubeletStopWait)
	return true
}

// StartKubelet starts a kubeadm VM's kubelet service again after
// StopKubelet (systemctl start kubelet).
func (s *Server) StartKubelet(zone, instance string) error {
	s.mu.Lock()
	x := s.vms["zones/"+zone+"/instances/"+instance]
	s.mu.Unlock()
	if x == nil || x.kubeadm == "" {
		return fmt.Errorf("gcefake: %s/%s is not a running kubeadm VM", zone, instance)
	}
	s.StopKubelet(zone, instance)
	if aerr := s.installKubeadm(x); aerr != nil {
		return aerr
	}
	return nil
}

// stopKubeadmVM ends what a kubeadm VM runs beyond its sshd: the kubelet
// service (its pods with it), then any process left in its network
// namespace (what an operator's session started), so that its mount
// namespace goes; then the machine's mount points no test bed uses.
func (s *Server) stopKubeadmVM(x *vpcVM) {
	s.mu.Lock()
	svc := x.kubelet
	x.kubelet = nil
	s.mu.Unlock()
	if svc != nil {
		svc.Close(kubeadmhost.KubeletStopWait)
	}
}

// killNamespace SIGKILLs every process left in network namespace ns and
// waits until none is (bounded).
func killNamespace(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = wait.Until(ctx, 20*time.Millisecond, "the processes of "+ns+" to end", func() (bool, error) {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		if err != nil {
			return true, nil // gone
		}
		pids := strings.Fields(string(out))
		for _, p := range pids {
			if n, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
		return len(pids) == 0, nil
	})
}

// releaseMountPoints removes the mount points the test beds made that no
// host uses any more (kubeadmhost.ReleaseMountPoints, under its lock).
func (s *Server) releaseMountPoints() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unlock, err := kubeadmhost.LockMounts(ctx)
	if err != nil {
		s.o.Logger.Warn("gcefake: mount points", "err", err)
		return
	}
	defer unlock()
	if err := kubeadmhost.ReleaseMountPoints(); err != nil {
		s.o.Logger.Warn("gcefake: mount points", "err", err)
	}
}
