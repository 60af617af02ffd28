package kubeadm

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ClusterConfiguration is what hamaster reads of kubeadm's
// ClusterConfiguration (kube-system/kubeadm-config, data key
// ClusterConfiguration; kubeadm.k8s.io/v1beta4 since v1.31, v1beta3
// before: cmd/kubeadm/app/phases/uploadconfig UploadConfiguration). The
// fields are the same in both versions.
type ClusterConfiguration struct {
	APIVersion           string `yaml:"apiVersion"`
	Kind                 string `yaml:"kind"`
	KubernetesVersion    string `yaml:"kubernetesVersion"`
	ControlPlaneEndpoint string `yaml:"controlPlaneEndpoint"`
	ClusterName          string `yaml:"clusterName"`
	CertificatesDir      string `yaml:"certificatesDir"`
	APIServer            struct {
		CertSANs []string `yaml:"certSANs"`
	} `yaml:"apiServer"`
	Networking struct {
		ServiceSubnet string `yaml:"serviceSubnet"`
		PodSubnet     string `yaml:"podSubnet"`
		DNSDomain     string `yaml:"dnsDomain"`
	} `yaml:"networking"`
	Etcd struct {
		Local *struct {
			DataDir string `yaml:"dataDir"`
		} `yaml:"local"`
		External *struct {
			Endpoints []string `yaml:"endpoints"`
		} `yaml:"external"`
	} `yaml:"etcd"`
}

// ParseClusterConfiguration reads doc, refusing what is not a kubeadm
// ClusterConfiguration hamaster manages: another kind or API group, or
// external etcd (the flavor manages stacked etcd members only, as
// kubeadm's own join --control-plane does).
func ParseClusterConfiguration(doc []byte) (ClusterConfiguration, error) {
	var c ClusterConfiguration
	if err := yaml.Unmarshal(doc, &c); err != nil {
		return c, fmt.Errorf("kubeadm-config ClusterConfiguration: %w", err)
	}
	if c.Kind != "ClusterConfiguration" || !strings.HasPrefix(c.APIVersion, "kubeadm.k8s.io/") {
		return c, fmt.Errorf("kubeadm-config ClusterConfiguration: apiVersion %q kind %q: want kubeadm.k8s.io/v1beta3 or v1beta4 ClusterConfiguration", c.APIVersion, c.Kind)
	}
	if c.Etcd.External != nil {
		return c, fmt.Errorf("kubeadm-config ClusterConfiguration: etcd.external: the cluster's etcd is external; the kubeadm flavor manages stacked etcd members (etcd.local), as kubeadm join --control-plane does")
	}
	if c.ControlPlaneEndpoint != "" {
		if _, err := SplitEndpoint(c.ControlPlaneEndpoint); err != nil {
			return c, fmt.Errorf("kubeadm-config ClusterConfiguration: controlPlaneEndpoint: %w", err)
		}
	}
	return c, nil
}

// Endpoint is a controlPlaneEndpoint split: Host is an IP or a DNS name;
// Port is 0 when the endpoint names none (kubeadm then uses the bind
// port: cmd/kubeadm/app/util/endpoint.go GetControlPlaneEndpoint).
type Endpoint struct {
	Host string
	Port int
}

// SplitEndpoint parses "host", "host:port" or "[v6]:port".
func SplitEndpoint(s string) (Endpoint, error) {
	if s == "" {
		return Endpoint{}, fmt.Errorf("endpoint is empty")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return Endpoint{Host: strings.Trim(s, "[]")}, nil
		}
		return Endpoint{}, fmt.Errorf("endpoint %q: want host or host:port: %w", s, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return Endpoint{}, fmt.Errorf("endpoint %q: port %q: want 1-65535", s, port)
	}
	if host == "" {
		return Endpoint{}, fmt.Errorf("endpoint %q: no host", s)
	}
	return Endpoint{Host: host, Port: n}, nil
}

// String is host:port (host alone without a port).
func (e Endpoint) String() string {
	if e.Port == 0 {
		return e.Host
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
}

// SetControlPlaneEndpoint rewrites the ClusterConfiguration doc for the
// conversion to HA (kubeadm#1955: kubeadm has no command for it): its
// controlPlaneEndpoint becomes endpoint, and apiServer.certSANs gains
// each of keep that the apiserver certificates must go on naming
// (the old endpoint's host, so that clients on the old address keep
// verifying) — kubeadm's GetAPIServerAltNames
// (cmd/kubeadm/app/util/pkiutil/pki_helpers.go) puts the
// controlPlaneEndpoint's host and every certSAN in the certificate `kubeadm
// init phase certs apiserver` issues from this configuration. Every other
// field is kept as it was, comments and order included. changed is false
// when doc already says so.
func SetControlPlaneEndpoint(doc []byte, endpoint string, keep []string) (out []byte, changed bool, err error) {
	if _, err := SplitEndpoint(endpoint); err != nil {
		return nil, false, fmt.Errorf("controlPlaneEndpoint: %w", err)
	}
	return editClusterConfiguration(doc, func(top *yaml.Node) (changed bool, err error) {
		if v := mapValue(top, "controlPlaneEndpoint"); v == nil {
			setMapValue(top, "controlPlaneEndpoint", scalar(endpoint))
			changed = true
		} else if v.Value != endpoint {
			v.Value, v.Tag, v.Style = endpoint, "!!str", 0
			changed = true
		}
		if addCertSANs(top, keep) {
			changed = true
		}
		return changed, nil
	})
}

// editClusterConfiguration lets edit change the ClusterConfiguration
// doc's top mapping (changed: whether it did) and writes it again, every
// other field kept as it was, comments and order included; doc itself
// when nothing changed.
func editClusterConfiguration(doc []byte, edit func(top *yaml.Node) (changed bool, err error)) ([]byte, bool, error) {
	if _, err := ParseClusterConfiguration(doc); err != nil {
		return nil, false, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, false, fmt.Errorf("kubeadm-config ClusterConfiguration: %w", err)
	}
	changed, err := edit(root.Content[0])
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return doc, false, nil
	}
	out, err := encodeYAML(&root)
	if err != nil {
		return nil, false, fmt.Errorf("write ClusterConfiguration: %w", err)
	}
	return out, true, nil
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

// mapValue is the value of key in the mapping m, nil if absent.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setMapValue sets key to v in the mapping m, appending it when absent.
func setMapValue(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

func removeMapKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}

// encodeYAML writes root as kubeadm and kubectl write YAML: two spaces.
func encodeYAML(root *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AddCertSANs adds each of sans missing from the ClusterConfiguration
// doc's apiServer.certSANs, keeping every other field as it was. changed
// is false when it names them all already.
func AddCertSANs(doc []byte, sans []string) (out []byte, changed bool, err error) {
	return editClusterConfiguration(doc, func(top *yaml.Node) (bool, error) { return addCertSANs(top, sans), nil })
}

// addCertSANs adds each of keep missing from top's apiServer.certSANs,
// reporting whether it added any.
func addCertSANs(top *yaml.Node, keep []string) (changed bool) {
	api := mapValue(top, "apiServer")
	if api == nil || api.Kind != yaml.MappingNode {
		api = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		setMapValue(top, "apiServer", api)
	}
	sans := mapValue(api, "certSANs")
	if sans == nil || sans.Kind != yaml.SequenceNode {
		sans = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		setMapValue(api, "certSANs", sans)
	}
	// kubeadm writes an empty apiServer as {}: what hamaster adds is
	// written in block style, as kubeadm writes a filled one.
	api.Style &^= yaml.FlowStyle
	sans.Style &^= yaml.FlowStyle
	have := map[string]bool{}
	for _, n := range sans.Content {
		have[n.Value] = true
	}
	for _, k := range keep {
		if k != "" && !have[k] {
			sans.Content = append(sans.Content, scalar(k))
			have[k] = true
			changed = true
		}
	}
	if len(sans.Content) == 0 {
		removeMapKey(api, "certSANs")
	}
	return changed
}
