package kubeadm

import (
	"fmt"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"
)

// Kubeconfig files on a kubeadm master, under /etc/kubernetes, that point
// at the controlPlaneEndpoint and so move with it when the cluster is
// converted to HA (cmd/kubeadm/app/phases/kubeconfig getKubeConfigSpecsBase:
// admin.conf, super-admin.conf and kubelet.conf use the
// controlPlaneEndpoint; controller-manager.conf and scheduler.conf use the
// master's own LocalAPIEndpoint since v1.29, and stay).
var EndpointKubeconfigs = []string{"admin.conf", "super-admin.conf", "kubelet.conf"}

// SetKubeconfigServer rewrites every cluster's server in the kubeconfig
// doc to server (https://host:port), keeping everything else (the
// CA, the credentials) as it was. changed is false when every server is
// already server.
func SetKubeconfigServer(doc []byte, server string) (out []byte, changed bool, err error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, false, fmt.Errorf("kubeconfig server %q: want https://host:port", server)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, false, fmt.Errorf("kubeconfig: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, false, fmt.Errorf("kubeconfig: empty document")
	}
	clusters := mapValue(root.Content[0], "clusters")
	if clusters == nil || clusters.Kind != yaml.SequenceNode || len(clusters.Content) == 0 {
		return nil, false, fmt.Errorf("kubeconfig: no clusters")
	}
	// Only the server values change, in place, so the file stays byte for
	// byte as kubeadm (client-go's clientcmd) wrote it otherwise.
	lines := strings.Split(string(doc), "\n")
	for _, c := range clusters.Content {
		s := mapValue(mapValue(c, "cluster"), "server")
		if s == nil || s.Kind != yaml.ScalarNode || s.Line < 1 || s.Line > len(lines) || s.Column < 1 || s.Column > len(lines[s.Line-1]) {
			return nil, false, fmt.Errorf("kubeconfig: a cluster has no server on a line of its own")
		}
		if s.Value == server {
			continue
		}
		lines[s.Line-1] = lines[s.Line-1][:s.Column-1] + server
		changed = true
	}
	if !changed {
		return doc, false, nil
	}
	return []byte(strings.Join(lines, "\n")), true, nil
}

// KubeconfigServer is the server of the kubeconfig doc's first cluster.
func KubeconfigServer(doc []byte) (string, error) {
	var k struct {
		Clusters []struct {
			Cluster struct {
				Server string `yaml:"server"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
	}
	if err := yaml.Unmarshal(doc, &k); err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	if len(k.Clusters) == 0 || k.Clusters[0].Cluster.Server == "" {
		return "", fmt.Errorf("kubeconfig: no cluster server")
	}
	return k.Clusters[0].Cluster.Server, nil
}
