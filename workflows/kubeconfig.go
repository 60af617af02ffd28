package workflows

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

// KubeconfigParams describe the credentials 'hamaster kubeconfig' writes.
type KubeconfigParams struct {
	// User is the client certificate's CN: the Kubernetes user name.
	User string
	// Groups are its O fields: Kubernetes groups (system:masters is
	// cluster-admin through RBAC's default bindings).
	Groups []string
	// Server overrides the endpoint (https://host:port); "" is the
	// cluster's: its DNS name when recorded, else the static IP (the LB's
	// address once there is one), on the apiserver port.
	Server string
}

// Kubeconfig issues a client certificate signed by the cluster CA and
// returns a kubeconfig (YAML) naming the cluster endpoint, trusting the
// cluster CA. Nothing in the cluster changes; the key exists only in the
// returned bytes.
func Kubeconfig(ctx context.Context, d *Deps, p KubeconfigParams) ([]byte, error) {
	if p.User == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--user: empty; want the certificate's CN, e.g. hamaster-admin")
	}
	ca, err := d.CA()
	if err != nil {
		return nil, err
	}
	server := p.Server
	if server == "" {
		host, _, err := d.Provider.StaticIP().Get(ctx)
		if err != nil {
			return nil, fmt.Errorf("cluster endpoint: %w", err)
		}
		if ep, err := LoadEndpoint(d.StateDir, d.Cluster); err == nil && ep.DNSName != "" {
			host = ep.DNSName
		}
		if host == "" {
			return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no static IP yet; pass --server", d.Cluster)
		}
		server = "https://" + net.JoinHostPort(host, strconv.Itoa(providers.EndpointPortOf(d.Provider)))
	}
	pair, err := ca.IssueClient(p.User, p.Groups, certs.ECDSA)
	if err != nil {
		return nil, err
	}
	return renderKubeconfig(d.Cluster, server, p.User, ca.CertPEM, pair.CertPEM, pair.KeyPEM)
}

// kubeconfig is the part of client-go's clientcmd v1 Config written here.
type kubeconfig struct {
	APIVersion     string         `yaml:"apiVersion"`
	Kind           string         `yaml:"kind"`
	Clusters       []namedCluster `yaml:"clusters"`
	Users          []namedUser    `yaml:"users"`
	Contexts       []namedContext `yaml:"contexts"`
	CurrentContext string         `yaml:"current-context"`
}

type namedCluster struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server                   string `yaml:"server"`
		CertificateAuthorityData string `yaml:"certificate-authority-data"`
	} `yaml:"cluster"`
}

type namedUser struct {
	Name string `yaml:"name"`
	User struct {
		ClientCertificateData string `yaml:"client-certificate-data"`
		ClientKeyData         string `yaml:"client-key-data"`
	} `yaml:"user"`
}

type namedContext struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster string `yaml:"cluster"`
		User    string `yaml:"user"`
	} `yaml:"context"`
}

func renderKubeconfig(cluster, server, user string, caPEM, certPEM, keyPEM []byte) ([]byte, error) {
	b64 := base64.StdEncoding.EncodeToString
	ctxName := user + "@" + cluster
	kc := kubeconfig{APIVersion: "v1", Kind: "Config", CurrentContext: ctxName}
	var c namedCluster
	c.Name = cluster
	c.Cluster.Server = server
	c.Cluster.CertificateAuthorityData = b64(caPEM)
	var u namedUser
	u.Name = ctxName
	u.User.ClientCertificateData = b64(certPEM)
	u.User.ClientKeyData = b64(keyPEM)
	var x namedContext
	x.Name = ctxName
	x.Context.Cluster, x.Context.User = cluster, ctxName
	kc.Clusters, kc.Users, kc.Contexts = []namedCluster{c}, []namedUser{u}, []namedContext{x}
	out, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	return out, nil
}
