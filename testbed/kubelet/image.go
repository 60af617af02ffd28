package kubelet

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/hamaster/hamaster/errkind"
)

// Images the stand-in runs without a container runtime. The repository
// is whatever kubeadm's imageRepository says (registry.k8s.io by
// default); only the image's last path element and tag matter.
const (
	imageEtcd = "etcd"
	// EtcdSubcommand is the subcommand of Self that runs etcd's real main
	// (go.etcd.io/etcd/server/v3/etcdmain) with the manifest's flags.
	EtcdSubcommand = "etcd"
	// EtcdOverrideDir is the directory of BinDir whose executable file
	// <tag> stands in for the etcd image of that tag in place of Self's
	// etcd: a test's knob for "an etcd release that behaves otherwise"
	// (metallabtest.BrokenEtcd). Without the file, which is the default,
	// every etcd tag runs Self's etcd.
	EtcdOverrideDir = "etcd"
)

// isControlPlaneImage tells the images run as <bin-dir>/<tag>/<name>,
// the real binaries 'make kube-apiserver' builds per version.
func isControlPlaneImage(name string) bool {
	switch name {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler":
		return true
	}
	return false
}

// isPullOnlyImage tells the images kubeadm pulls in preflight
// (cmd/kubeadm/app/images GetControlPlaneImages: pause, coredns,
// kube-proxy besides the control plane's) that no static pod of kubeadm
// runs: the runtime "has" them, the stand-in never runs them (CoreDNS
// and kube-proxy are a Deployment and a DaemonSet, which it does not run).
func isPullOnlyImage(name string) bool {
	switch name {
	case "pause", "coredns", "kube-proxy":
		return true
	}
	return false
}

// Resolver maps a container to the program that stands in for its image.
type Resolver struct {
	// BinDir holds <version>/<name> for the control-plane images, and
	// EtcdOverrideDir/<tag> for an etcd tag a test overrides.
	BinDir string
	// Self is the executable whose `etcd` subcommand runs etcd.
	Self string
	// LookPath finds a generic image's command[0] on the host's PATH
	// (nil: exec.LookPath).
	LookPath func(file string) (string, error)
}

// ProcessSpec is what runs for one container: host network, host paths.
type ProcessSpec struct {
	Container string
	Path      string
	Args      []string // without the program name
	Env       []string // NAME=value
	Dir       string
}

// splitImage returns an image's last path element and tag
// ("registry.k8s.io/etcd:3.5.21-0" → "etcd", "3.5.21-0"); a digest
// (@sha256:...) is dropped.
func splitImage(image string) (name, tag string) {
	image, _, _ = strings.Cut(image, "@")
	name = path.Base(image)
	if i := strings.LastIndex(name, ":"); i >= 0 {
		name, tag = name[:i], name[i+1:]
	}
	return name, tag
}

// Resolve returns the process for container c. The command is the
// container's command + args as the runtime would exec them
// (kubeadm's control-plane manifests put the binary name and every flag
// in command); its first word is replaced by the binary for the image.
// kubeadm's pods are hostNetwork and mount each hostPath volume at its
// own path (cmd/kubeadm/app/phases/controlplane/volumes.go
// getHostPathVolumesForTheControlPlane: NewHostPathMount(…, hostPath,
// hostPath, …); etcd/local.go likewise), so the process sees the paths as
// written. Only a ClusterConfiguration's extraVolumes can set a different
// mountPath; such a mount is refused rather than run wrongly.
func (r Resolver) Resolve(pod *corev1.Pod, c corev1.Container) (ProcessSpec, error) {
	if err := sameMountPaths(pod, c); err != nil {
		return ProcessSpec{}, err
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) == 0 && (name0(c.Image) == imageEtcd || isControlPlaneImage(name0(c.Image))) {
		return ProcessSpec{}, errkind.Errorf(errkind.InvalidArgument, "container %s: no command (the stand-in cannot read an image's entrypoint)", c.Name)
	}
	name, tag := splitImage(c.Image)
	spec := ProcessSpec{Container: c.Name, Dir: c.WorkingDir}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return ProcessSpec{}, errkind.Errorf(errkind.InvalidArgument, "container %s: env %s: valueFrom is not supported", c.Name, e.Name)
		}
		spec.Env = append(spec.Env, e.Name+"="+e.Value)
	}
	switch {
	case name == imageEtcd:
		if r.Self == "" {
			return ProcessSpec{}, fmt.Errorf("container %s: no executable to run etcd with", c.Name)
		}
		spec.Path = r.Self
		spec.Args = append([]string{EtcdSubcommand}, argv[1:]...)
		if p := r.etcdOverride(tag); p != "" {
			spec.Path, spec.Args = p, argv[1:]
		}
	case isControlPlaneImage(name):
		if _, err := ParseVersion(tag); err != nil {
			return ProcessSpec{}, errkind.Errorf(errkind.InvalidArgument, "container %s: image %s: %w", c.Name, c.Image, err)
		}
		if r.BinDir == "" {
			return ProcessSpec{}, fmt.Errorf("container %s: image %s: no binaries directory (--hamaster-bin-dir)", c.Name, c.Image)
		}
		spec.Path = filepath.Join(r.BinDir, tag, name)
		spec.Args = argv[1:]
	case isPullOnlyImage(name):
		return ProcessSpec{}, errkind.Errorf(errkind.InvalidArgument, "container %s: image %s: the stand-in does not run %s (no static pod of kubeadm does)", c.Name, c.Image, name)
	default:
		// Any other image (keepalived, haproxy: kubeadm's
		// docs/ha-considerations.md option 2, as static pods): the
		// image's filesystem is the host's, so its command runs when
		// command[0] is a program of the host's. The image's entrypoint
		// cannot be read: a container without command is refused.
		if len(c.Command) == 0 {
			return ProcessSpec{}, errkind.Errorf(errkind.InvalidArgument, "container %s: image %s: no command (the stand-in cannot read an image's entrypoint)", c.Name, c.Image)
		}
		look := r.LookPath
		if look == nil {
			look = exec.LookPath
		}
		p, err := look(c.Command[0])
		if err != nil {
			return ProcessSpec{}, errkind.Errorf(errkind.InvalidArgument, "container %s: image %s: the stand-in runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler, or a command of the host's; %s: %w", c.Name, c.Image, c.Command[0], err)
		}
		spec.Path = p
		spec.Args = argv[1:]
	}
	return spec, nil
}

// ResolveImage reports whether the host can run image, for the runtime
// endpoint's PullImage (package cri's Images): the control-plane images
// of a version whose binaries are in BinDir (size: the binary's), etcd of
// any tag (Self runs it), pause and coredns, and kube-proxy of a version
// with binaries (pulled by kubeadm's preflight, never run). Anything else
// is errkind.NotFound, as a registry without the image answers: a version
// the test bed has not built fails kubeadm's preflight ImagePull.
func (r Resolver) ResolveImage(image string) (uint64, error) {
	name, tag := splitImage(image)
	size := func(p string) (uint64, error) {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, errkind.Errorf(errkind.NotFound, "image %s: %w", image, err)
		}
		return uint64(fi.Size()), nil
	}
	switch {
	case name == imageEtcd:
		if r.Self == "" {
			return 0, errkind.Errorf(errkind.NotFound, "image %s: no executable to run etcd with", image)
		}
		return size(r.Self)
	case isControlPlaneImage(name), name == "kube-proxy":
		if _, err := ParseVersion(tag); err != nil {
			return 0, errkind.Errorf(errkind.NotFound, "image %s: %w", image, err)
		}
		if r.BinDir == "" {
			return 0, errkind.Errorf(errkind.NotFound, "image %s: no binaries directory (--hamaster-bin-dir)", image)
		}
		if name == "kube-proxy" {
			return size(filepath.Join(r.BinDir, tag, "kube-apiserver"))
		}
		return size(filepath.Join(r.BinDir, tag, name))
	case name == "pause", name == "coredns":
		return 0, nil
	}
	return 0, errkind.Errorf(errkind.NotFound, "image %s: the stand-in pulls only the images kubeadm lists", image)
}

// etcdOverride is BinDir's EtcdOverrideDir/<tag> when it is an
// executable file, else "". It is looked up when the kubelet starts a
// pod (a changed manifest), so a test arms and disarms it while the
// kubelet runs.
func (r Resolver) etcdOverride(tag string) string {
	if r.BinDir == "" || tag == "" || strings.ContainsAny(tag, "/\\") || tag == "." || tag == ".." {
		return ""
	}
	p := filepath.Join(r.BinDir, EtcdOverrideDir, tag)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

func name0(image string) string {
	name, _ := splitImage(image)
	return name
}

func sameMountPaths(pod *corev1.Pod, c corev1.Container) error {
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range c.VolumeMounts {
		hp, ok := hostPaths[m.Name]
		if !ok {
			return errkind.Errorf(errkind.InvalidArgument, "container %s: volume %s is not a hostPath volume", c.Name, m.Name)
		}
		if filepath.Clean(hp) != filepath.Clean(m.MountPath) || m.SubPath != "" {
			return errkind.Errorf(errkind.InvalidArgument, "container %s: volume %s mounts host %s at %s: the stand-in runs processes on the host's paths", c.Name, m.Name, hp, m.MountPath)
		}
	}
	return nil
}
