package workflows

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// MaxClientValidity bounds a kubeconfig's client certificate: one year,
// kubeadm's CertificateValidityPeriod (beyond which `kubeadm kubeconfig
// user --validity-period` warns) and what hamaster's own CA issues by
// default. A client certificate cannot be revoked.
const MaxClientValidity = 365 * 24 * time.Hour

// KubeconfigParams describe the credentials 'hamaster kubeconfig' writes.
type KubeconfigParams struct {
	// User is the client certificate's CN: the Kubernetes user name.
	User string
	// Groups are its O fields: Kubernetes groups. nil: the cluster's
	// administrators' group, system:masters for hamaster's own masters
	// (cluster-admin through RBAC's default bindings), the flavor's
	// choice for masters that carry their own CA (kubeadm's
	// kubeadm:cluster-admins from v1.29).
	Groups []string
	// Validity is how long the certificate is valid from now, at most
	// MaxClientValidity; 0: MaxClientValidity.
	Validity time.Duration
	// Server overrides the endpoint (https://host:port); "" is the
	// cluster's: for hamaster's own masters its DNS name when recorded,
	// else the static IP (the LB's address once there is one), on the
	// apiserver port; for masters that record their endpoint (kubeadm's
	// controlPlaneEndpoint), that one, or the single master's own
	// address when they record none.
	Server string
}

// IssuedKubeconfig is a kubeconfig Kubeconfig made, and what it says.
type IssuedKubeconfig struct {
	// Doc is the kubeconfig (YAML). It holds the client's private key.
	Doc      []byte
	Server   string
	User     string
	Groups   []string
	NotAfter time.Time
	// IssuedOn names the master whose own tool issued the certificate
	// (flavors.ClientIssuer); "" when hamaster issued it from the cluster
	// CA in the state directory.
	IssuedOn string
}

// Kubeconfig issues a client certificate and returns a kubeconfig naming
// the cluster endpoint and trusting the cluster CA. Nothing in the
// cluster changes. For hamaster's own masters the certificate is signed
// here by the cluster CA in the state directory and its key exists only
// in the returned bytes; for masters that carry their own CA
// (no flavors.ReplicaCertIssuer) the flavor's tool issues it on a running
// master (flavors.ClientIssuer), so the CA key never leaves the masters.
func Kubeconfig(ctx context.Context, d *Deps, p KubeconfigParams) (IssuedKubeconfig, error) {
	if err := d.checkBound(); err != nil {
		return IssuedKubeconfig{}, err
	}
	if p.User == "" {
		return IssuedKubeconfig{}, errkind.Errorf(errkind.InvalidArgument, "--user: empty; want the certificate's CN, e.g. hamaster-admin")
	}
	if p.Validity < 0 || p.Validity > MaxClientValidity {
		return IssuedKubeconfig{}, errkind.Errorf(errkind.InvalidArgument, "--validity %v: want more than 0 and at most %v (a client certificate cannot be revoked)", p.Validity, MaxClientValidity)
	}
	if p.Validity == 0 {
		p.Validity = MaxClientValidity
	}
	if d.FlavorCaps().ReplicaCertIssuer == nil {
		return mastersKubeconfig(ctx, d, d.Flavor(), p)
	}
	ca, err := d.CA()
	if err != nil {
		return IssuedKubeconfig{}, err
	}
	server := p.Server
	if server == "" {
		host, _, err := d.Provider.StaticIP().Get(ctx)
		if err != nil {
			return IssuedKubeconfig{}, fmt.Errorf("cluster endpoint: %w", err)
		}
		if ep, err := LoadEndpoint(d.StateDir, d.Cluster); err == nil && ep.DNSName != "" {
			host = ep.DNSName
		}
		if host == "" {
			return IssuedKubeconfig{}, errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no static IP yet; pass --server", d.Cluster)
		}
		server = "https://" + net.JoinHostPort(host, strconv.Itoa(providers.EndpointPortOf(d.Provider)))
	}
	groups := p.Groups
	if groups == nil {
		groups = []string{"system:masters"}
	}
	pair, err := ca.IssueClientFor(p.User, groups, certs.ECDSA, p.Validity)
	if err != nil {
		return IssuedKubeconfig{}, err
	}
	return issued(d.Cluster, server, p.User, groups, "", ca.CertPEM, pair.CertPEM, pair.KeyPEM)
}

// mastersKubeconfig is Kubeconfig for masters that carry their own CA:
// the flavor's tool issues the certificate on a master.
func mastersKubeconfig(ctx context.Context, d *Deps, f flavors.Flavor, p KubeconfigParams) (IssuedKubeconfig, error) {
	ci := d.FlavorCaps().ClientIssuer
	if ci == nil {
		return IssuedKubeconfig{}, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: the %s flavor's masters carry their own CA, and hamaster cannot issue a client certificate from it yet: use the credentials their tool gives", d.Cluster, f.Name())
	}
	creds, err := ci.IssueClient(ctx, flavors.ClientRequest{User: p.User, Groups: p.Groups, Validity: p.Validity})
	if err != nil {
		return IssuedKubeconfig{}, fmt.Errorf("issue a client certificate for %s from the masters' CA (the %s flavor): %w", p.User, f.Name(), err)
	}
	return issued(d.Cluster, cmp.Or(p.Server, creds.Server), p.User, creds.Groups, creds.Master, creds.CACertPEM, creds.CertPEM, creds.KeyPEM)
}

func issued(cluster, server, user string, groups []string, master string, caPEM, certPEM, keyPEM []byte) (IssuedKubeconfig, error) {
	c, err := certs.ParseCertPEM(certPEM)
	if err != nil {
		return IssuedKubeconfig{}, fmt.Errorf("the issued client certificate: %w", err)
	}
	doc, err := renderKubeconfig(cluster, server, user, caPEM, certPEM, keyPEM)
	if err != nil {
		return IssuedKubeconfig{}, err
	}
	return IssuedKubeconfig{Doc: doc, Server: server, User: user, Groups: groups, NotAfter: c.NotAfter, IssuedOn: master}, nil
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
