package kubelet

import (
	"fmt"
	"os"
	"strings"

	"github.com/hamaster/hamaster/errkind"
)

// Default paths: the ones kubeadm writes and the kubelet unit kubeadm
// installs passes (cmd/kubeadm/app/constants/constants.go,
// 10-kubeadm.conf); each host has its own /etc/kubernetes and
// /var/lib/kubelet (a mount namespace per host), so they stay as written.
const (
	DefaultRootDir = "/var/lib/kubelet"

	// EnvVersion and EnvBinDir are the environment's defaults for
	// --hamaster-version and --hamaster-bin-dir.
	EnvVersion = "HAMASTER_KUBELET_VERSION"
	EnvBinDir  = "HAMASTER_KUBELET_BIN_DIR"
)

// Options are the kubelet's command-line flags: the real kubelet's that
// kubeadm's unit and kubeadm-flags.env pass, and the stand-in's own
// (--hamaster-*).
//
// The version the stand-in reports (kubelet --version, the Node's
// status.nodeInfo.kubeletVersion) is --hamaster-version (else
// $HAMASTER_KUBELET_VERSION): the test bed installs `kubelet` on a host as
// a wrapper script that runs hamaster-kubelet with that flag baked in, so
// a "package upgrade" of the kubelet is writing a new wrapper with the new
// version (and restarting it), as apt would replace /usr/bin/kubelet.
type Options struct {
	BootstrapKubeconfig string // --bootstrap-kubeconfig
	Kubeconfig          string // --kubeconfig
	Config              string // --config: the KubeletConfiguration file
	HostnameOverride    string // --hostname-override
	NodeIP              string // --node-ip
	RootDir             string // --root-dir
	CertDir             string // --cert-dir (default <root-dir>/pki)
	NodeLabels          map[string]string
	ShowVersion         bool // --version
	// RuntimeEndpoint is the unix socket the kubelet serves the runtime
	// endpoint (package cri) on: --container-runtime-endpoint, which
	// kubeadm-flags.env passes (unix:// stripped), else cri.DefaultSocket.
	RuntimeEndpoint string

	Version string // --hamaster-version: vX.Y.Z reported as the kubelet's
	BinDir  string // --hamaster-bin-dir: <dir>/<version>/<binary>
	// Self is the program that runs `Self etcd <flags>` for an etcd
	// static pod (--hamaster-self; default: this executable).
	Self string

	// Ignored lists the flags the real kubelet has and the stand-in does
	// not use (--pod-infra-container-image,
	// ...), logged at debug level by Run.
	Ignored []string
}

// ParseFlags parses the kubelet's arguments as the real kubelet's pflag
// set would (--name=value or --name value; the kubelet takes no
// positional arguments, so a word after a flag without "=" is its value).
// A flag the stand-in does not know is kept in Ignored rather than
// refused: kubeadm-flags.env carries runtime flags a process runner has no
// use for. Bad values are errkind.InvalidArgument.
func ParseFlags(args []string, getenv func(string) string) (Options, error) {
	o := Options{RootDir: DefaultRootDir, Version: getenv(EnvVersion), BinDir: getenv(EnvBinDir)}
	// bool flags take no separate value word.
	bools := map[string]*bool{"version": &o.ShowVersion}
	strs := map[string]*string{
		"bootstrap-kubeconfig":       &o.BootstrapKubeconfig,
		"kubeconfig":                 &o.Kubeconfig,
		"config":                     &o.Config,
		"hostname-override":          &o.HostnameOverride,
		"node-ip":                    &o.NodeIP,
		"root-dir":                   &o.RootDir,
		"cert-dir":                   &o.CertDir,
		"hamaster-version":           &o.Version,
		"hamaster-bin-dir":           &o.BinDir,
		"hamaster-self":              &o.Self,
		"container-runtime-endpoint": &o.RuntimeEndpoint,
	}
	var labels string
	strs["node-labels"] = &labels
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			return Options{}, errkind.Errorf(errkind.InvalidArgument, "unexpected argument %q (the kubelet takes flags only)", a)
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if b, ok := bools[name]; ok {
			v := true
			if hasVal {
				switch val {
				case "true":
				case "false":
					v = false
				default:
					return Options{}, errkind.Errorf(errkind.InvalidArgument, "--%s=%q: want true or false", name, val)
				}
			}
			*b = v
			continue
		}
		s, known := strs[name]
		if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			val, hasVal = args[i], true
			a += " " + val
		}
		if !known {
			o.Ignored = append(o.Ignored, a)
			continue
		}
		if !hasVal {
			return Options{}, errkind.Errorf(errkind.InvalidArgument, "--%s needs a value", name)
		}
		*s = val
	}
	if labels != "" {
		o.NodeLabels = map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return Options{}, errkind.Errorf(errkind.InvalidArgument, "--node-labels: %q is not key=value", kv)
			}
			o.NodeLabels[k] = v
		}
	}
	if o.RuntimeEndpoint != "" {
		ep, ok := strings.CutPrefix(o.RuntimeEndpoint, "unix://")
		if !ok && strings.Contains(o.RuntimeEndpoint, "://") {
			return Options{}, errkind.Errorf(errkind.InvalidArgument, "--container-runtime-endpoint %q: the stand-in serves a unix socket only", o.RuntimeEndpoint)
		}
		o.RuntimeEndpoint = ep
	}
	if o.CertDir == "" {
		o.CertDir = o.RootDir + "/pki"
	}
	if o.Version != "" {
		if _, err := ParseVersion(o.Version); err != nil {
			return Options{}, errkind.Errorf(errkind.InvalidArgument, "--hamaster-version: %w", err)
		}
	}
	return o, nil
}

// Check validates what Run needs beyond --version: the version, the
// config file and a kubeconfig to reach the apiserver through.
func (o Options) Check() error {
	if o.Version == "" {
		return errkind.Errorf(errkind.InvalidArgument, "no version: set --hamaster-version or $%s", EnvVersion)
	}
	if o.Config == "" {
		return errkind.Errorf(errkind.InvalidArgument, "--config is required (kubeadm's unit passes /var/lib/kubelet/config.yaml)")
	}
	if o.Kubeconfig == "" {
		return errkind.Errorf(errkind.InvalidArgument, "--kubeconfig is required (kubeadm's unit passes /etc/kubernetes/kubelet.conf)")
	}
	return nil
}

// NodeName is the Node's name: --hostname-override, else the host name
// lower-cased, as the real kubelet's nodeutil.GetHostname does.
func (o Options) NodeName() (string, error) {
	if o.HostnameOverride != "" {
		return strings.ToLower(strings.TrimSpace(o.HostnameOverride)), nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node name: %w", err)
	}
	return strings.ToLower(strings.TrimSpace(h)), nil
}
