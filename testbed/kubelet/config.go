package kubelet

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hamaster/hamaster/errkind"
)

// The KubeletConfiguration kind and group kubeadm writes to
// /var/lib/kubelet/config.yaml (cmd/kubeadm/app/componentconfigs/kubelet.go).
const (
	ConfigAPIVersion = "kubelet.config.k8s.io/v1beta1"
	ConfigKind       = "KubeletConfiguration"
)

// Config is the part of the KubeletConfiguration (k8s.io/kubelet
// config/v1beta1 types.go, same JSON names) the stand-in acts on; every
// other field kubeadm writes (cgroupDriver, authentication, clusterDNS,
// ...) is read and ignored.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	StaticPodPath             string          `json:"staticPodPath,omitempty"`
	PodLogsDir                string          `json:"podLogsDir,omitempty"`
	FileCheckFrequency        metav1.Duration `json:"fileCheckFrequency,omitempty"`
	HealthzPort               *int32          `json:"healthzPort,omitempty"`
	HealthzBindAddress        string          `json:"healthzBindAddress,omitempty"`
	NodeStatusUpdateFrequency metav1.Duration `json:"nodeStatusUpdateFrequency,omitempty"`
	NodeLeaseDurationSeconds  int32           `json:"nodeLeaseDurationSeconds,omitempty"`
	RotateCertificates        bool            `json:"rotateCertificates,omitempty"`
}

// The real kubelet's defaults (k8s.io/kubernetes pkg/kubelet/apis/config/
// v1beta1/defaults.go), except fileCheckFrequency: the real kubelet also
// watches the directory with inotify, so a changed manifest is seen at
// once; the stand-in polls, so its default is short.
const (
	defaultHealthzPort        = 10248
	defaultHealthzBindAddress = "127.0.0.1"
	defaultPodLogsDir         = "/var/log/pods"
	defaultFileCheck          = time.Second
	defaultStatusUpdate       = 10 * time.Second
	defaultLeaseDuration      = 40
)

// ParseConfig reads a KubeletConfiguration and fills in the defaults.
// Unknown fields are fine (kubeadm writes many); a wrong kind is not.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "kubelet config: %w", err)
	}
	if c.Kind != ConfigKind || c.APIVersion != ConfigAPIVersion {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "kubelet config: kind %q apiVersion %q, want %s %s", c.Kind, c.APIVersion, ConfigKind, ConfigAPIVersion)
	}
	if c.HealthzPort == nil {
		p := int32(defaultHealthzPort)
		c.HealthzPort = &p
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = defaultHealthzBindAddress
	}
	if net.ParseIP(c.HealthzBindAddress) == nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "kubelet config: healthzBindAddress %q is not an IP address", c.HealthzBindAddress)
	}
	if c.PodLogsDir == "" {
		c.PodLogsDir = defaultPodLogsDir
	}
	if c.FileCheckFrequency.Duration <= 0 || c.FileCheckFrequency.Duration > defaultFileCheck {
		// kubeadm writes 0s (the real kubelet's inotify makes it moot).
		c.FileCheckFrequency.Duration = defaultFileCheck
	}
	if c.NodeStatusUpdateFrequency.Duration <= 0 {
		c.NodeStatusUpdateFrequency.Duration = defaultStatusUpdate
	}
	if c.NodeLeaseDurationSeconds <= 0 {
		c.NodeLeaseDurationSeconds = defaultLeaseDuration
	}
	return c, nil
}

// LoadConfig reads the config file at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("kubelet config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// HealthzAddr is host:port of /healthz, "" when healthzPort is 0.
func (c Config) HealthzAddr() string {
	if c.HealthzPort == nil || *c.HealthzPort == 0 {
		return ""
	}
	return net.JoinHostPort(c.HealthzBindAddress, strconv.Itoa(int(*c.HealthzPort)))
}
