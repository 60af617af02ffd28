package kubeadm

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

var _ flavors.ClientIssuer = (*Flavor)(nil)

// A person's client certificate, as kubeadm issues one
// (cmd/kubeadm/app/cmd/kubeconfig.go newCmdUserKubeConfig, `kubeadm
// kubeconfig user --client-name --org --validity-period`; the
// certificate from cmd/kubeadm/app/phases/kubeconfig
// WriteKubeConfigWithClientCert: CN the client name, O the
// organizations, ExtKeyUsage ClientAuth only, signed by
// certificatesDir/ca.key).
const (
	// MaxClientValidity is kubeadm's CertificateValidityPeriod (one
	// year): `kubeadm kubeconfig user --validity-period`'s default,
	// beyond which kubeadm warns "this may increase security risks". A
	// client certificate cannot be revoked, so hamaster refuses more.
	MaxClientValidity = 365 * 24 * time.Hour
	// ClusterAdminsGroup is the group of admin.conf's certificate since
	// kubeadm v1.29, bound to cluster-admin by the ClusterRoleBinding of
	// the same name that kubeadm init (and upgrade apply to v1.29)
	// creates (cmd/kubeadm/app/phases/kubeconfig getKubeConfigSpecsBase,
	// EnsureAdminClusterRoleBindingImpl; constants
	// ClusterAdminsGroupAndClusterRoleBinding).
	ClusterAdminsGroup = "kubeadm:cluster-admins"
	// MastersGroup is system:masters: the apiserver's super-user group,
	// which no RBAC change can take away (kubeadm's super-admin.conf
	// since v1.29, admin.conf before).
	MastersGroup = "system:masters"
)

// clusterAdminsSince is the first release whose kubeadm binds
// ClusterAdminsGroup to cluster-admin.
var clusterAdminsSince = version.MustParseGeneric("1.29.0")

// AdminGroups are the groups a person's administrator certificate gets by
// default on a cluster at kubernetesVersion (kubeadm-config's): those of
// kubeadm's own admin.conf. kubeadm:cluster-admins from v1.29 (a
// ClusterRoleBinding an operator can delete, unlike system:masters,
// which bypasses RBAC and cannot be revoked: the reason kubeadm moved
// admin.conf off it, keeping system:masters for the break-glass
// super-admin.conf); system:masters before.
func AdminGroups(kubernetesVersion string) ([]string, error) {
	v, err := version.ParseGeneric(kubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("kubeadm-config's kubernetesVersion %q: %w", kubernetesVersion, err)
	}
	if v.AtLeast(clusterAdminsSince) {
		return []string{ClusterAdminsGroup}, nil
	}
	return []string{MastersGroup}, nil
}

// CheckClientRequest refuses what kubeadm's flags would not carry as
// given: an empty user or group, control characters, a group with a
// comma or a double quote (`--org` is a string slice, which pflag splits
// as CSV), a validity outside (0, MaxClientValidity].
func CheckClientRequest(user string, groups []string, validity time.Duration) error {
	bad := func(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }
	if strings.TrimSpace(user) == "" || bad(user) {
		return errkind.Errorf(errkind.InvalidArgument, "--user %q: want a Kubernetes user name (the certificate's CN), e.g. hamaster-admin", user)
	}
	for _, g := range groups {
		if strings.TrimSpace(g) == "" || bad(g) || strings.ContainsAny(g, `,"`) {
			return errkind.Errorf(errkind.InvalidArgument, "--group %q: want a Kubernetes group name without commas or double quotes (kubeadm's --org splits on them)", g)
		}
	}
	if validity <= 0 || validity > MaxClientValidity {
		return errkind.Errorf(errkind.InvalidArgument, "--validity %v: want more than 0 and at most %v (kubeadm's certificate validity period; a client certificate cannot be revoked)", validity, MaxClientValidity)
	}
	return nil
}

// configDelimiter ends the here-document that hands kubeadm the
// cluster's ClusterConfiguration on its stdin.
const configDelimiter = "HAMASTER_KUBEADM_CLUSTER_CONFIGURATION"

// UserCommand is the command run on a master to issue a client
// certificate for user in groups, valid for validity: `kubeadm
// kubeconfig user` with the cluster's own ClusterConfiguration
// (kubeadm-config's, on stdin: kubeadm reads certificatesDir, the CA's
// key algorithm (encryptionAlgorithm), clusterName and
// controlPlaneEndpoint from it, and with its kubernetesVersion it does
// not look the stable release up on the internet as it does with no
// --config), as kubeadm's documentation has an operator do it
// ("Generating kubeconfig files for additional users"). The request is
// checked first (CheckClientRequest).
func UserCommand(clusterConfig []byte, user string, groups []string, validity time.Duration) (string, error) {
	if err := CheckClientRequest(user, groups, validity); err != nil {
		return "", err
	}
	if len(groups) == 0 {
		return "", errkind.Errorf(errkind.InvalidArgument, "--group: none; want at least one (the certificate's O)")
	}
	if _, err := ParseClusterConfiguration(clusterConfig); err != nil {
		return "", err
	}
	doc := strings.TrimRight(string(clusterConfig), "\n")
	for _, l := range strings.Split(doc, "\n") {
		if strings.TrimSpace(l) == configDelimiter {
			return "", fmt.Errorf("kubeadm-config's ClusterConfiguration has a line %q, which would end the here-document that carries it", configDelimiter)
		}
	}
	var b strings.Builder
	b.WriteString("kubeadm kubeconfig user --client-name " + remote.ShellQuote(user))
	for _, g := range groups {
		b.WriteString(" --org " + remote.ShellQuote(g))
	}
	fmt.Fprintf(&b, " --validity-period %s --config /dev/stdin <<'%s'\n%s\n%s\n", validity, configDelimiter, doc, configDelimiter)
	return b.String(), nil
}

// UserKubeconfig is what hamaster takes of the kubeconfig `kubeadm
// kubeconfig user` prints (client-go's clientcmd v1 Config, one cluster
// and one user): the CA and the credentials.
type UserKubeconfig struct {
	Server                string
	CACertPEM             []byte
	CertPEM, KeyPEM       []byte
	ClusterName, UserName string
}

// ParseUserKubeconfig reads kubeadm's kubeconfig doc. Its errors never
// quote doc, which holds a private key.
func ParseUserKubeconfig(doc []byte) (UserKubeconfig, error) {
	var k struct {
		Clusters []struct {
			Name    string `yaml:"name"`
			Cluster struct {
				Server string `yaml:"server"`
				CA     string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
		Users []struct {
			Name string `yaml:"name"`
			User struct {
				Cert string `yaml:"client-certificate-data"`
				Key  string `yaml:"client-key-data"`
			} `yaml:"user"`
		} `yaml:"users"`
	}
	var out UserKubeconfig
	if err := yaml.Unmarshal(doc, &k); err != nil {
		return out, errors.New("kubeadm's kubeconfig is not YAML") // the error would quote it
	}
	if len(k.Clusters) != 1 || len(k.Users) != 1 {
		return out, fmt.Errorf("kubeadm's kubeconfig has %d clusters and %d users, want one of each", len(k.Clusters), len(k.Users))
	}
	c, u := k.Clusters[0], k.Users[0]
	out.Server, out.ClusterName, out.UserName = c.Cluster.Server, c.Name, u.Name
	for _, f := range []struct {
		name, b64 string
		dst       *[]byte
	}{
		{"certificate-authority-data", c.Cluster.CA, &out.CACertPEM},
		{"client-certificate-data", u.User.Cert, &out.CertPEM},
		{"client-key-data", u.User.Key, &out.KeyPEM},
	} {
		b, err := base64.StdEncoding.DecodeString(f.b64)
		if err != nil || len(b) == 0 {
			return UserKubeconfig{}, fmt.Errorf("kubeadm's kubeconfig: %s is empty or not base64", f.name)
		}
		*f.dst = b
	}
	return out, nil
}

// CheckUserCertificate verifies what kubeadm issued before hamaster hands
// it out: the key is the certificate's, the certificate is signed by
// caPEM for client authentication, names user and groups, and expires
// no later than notAfter.
func CheckUserCertificate(kc UserKubeconfig, user string, groups []string, notAfter time.Time) error {
	if _, err := tls.X509KeyPair(kc.CertPEM, kc.KeyPEM); err != nil {
		return fmt.Errorf("the client key is not the certificate's: %w", err)
	}
	c, err := certs.ParseCertPEM(kc.CertPEM)
	if err != nil {
		return fmt.Errorf("the client certificate: %w", err)
	}
	ca, err := certs.ParseCertPEM(kc.CACertPEM)
	if err != nil {
		return fmt.Errorf("the CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the client certificate is not valid for client authentication under the cluster CA: %w", err)
	}
	// The O values are one DER SET, sorted by their encoding, not in the
	// order asked for.
	if c.Subject.CommonName != user || !slices.Equal(slices.Sorted(slices.Values(c.Subject.Organization)), slices.Sorted(slices.Values(groups))) {
		return fmt.Errorf("the client certificate is for CN=%q O=%q, want CN=%q O=%q", c.Subject.CommonName, c.Subject.Organization, user, groups)
	}
	if c.NotAfter.After(notAfter) {
		return fmt.Errorf("the client certificate expires at %s, after %s", c.NotAfter.UTC().Format(time.RFC3339), notAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// EndpointURL is the https URL of a controlPlaneEndpoint (host or
// host:port; kubeadm's GetControlPlaneEndpoint gives a bare host the
// apiserver's bind port).
func EndpointURL(endpoint string) (string, error) {
	e, err := SplitEndpoint(endpoint)
	if err != nil {
		return "", err
	}
	if e.Port == 0 {
		e.Port = DefaultBindPort
	}
	return "https://" + net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), nil
}

// IssueClient implements flavors.ClientIssuer with the real `kubeadm
// kubeconfig user`, run on a running master over the provider's way in:
// the CA key is read there by kubeadm and never leaves the master. The
// client key is made there too (kubeadm has no way to sign a request
// made elsewhere) and printed, never written: it crosses only the SSH
// session, to a master whose root holds the CA key already, so no one
// can use it who could not mint such a certificate anyway. Signing here
// with a key read from the master would instead copy the cluster's
// most valuable secret to every operator's machine that runs the
// command; the certificates API (a CSR approved through admin.conf and
// signed by the controller-manager) would leave a request object in the
// cluster and fail while the controller-manager is down.
//
// The server is the endpoint kubeadm-config records (the VIP after the
// conversion to HA), or the master's own apiserver as the provider
// reaches it when none is recorded (a single master built without
// controlPlaneEndpoint: kubeadm would name the address of the master's
// default route there). Each running master is tried in turn.
func (f *Flavor) IssueClient(ctx context.Context, req flavors.ClientRequest) (flavors.ClientCredentials, error) {
	if req.Validity == 0 {
		req.Validity = MaxClientValidity
	}
	if err := CheckClientRequest(req.User, req.Groups, req.Validity); err != nil {
		return flavors.ClientCredentials{}, err
	}
	all, err := f.p.Instances().List(ctx)
	if err != nil {
		return flavors.ClientCredentials{}, fmt.Errorf("list the masters: %w", err)
	}
	var rs []providers.Replica
	var down []string
	for _, r := range all {
		if r.Running() {
			rs = append(rs, r)
		} else {
			down = append(down, r.Name+" "+r.State)
		}
	}
	if len(rs) == 0 {
		return flavors.ClientCredentials{}, errkind.Errorf(errkind.FailedPrecondition, "no master is running to issue a client certificate on (%s): kubeadm kubeconfig user runs where the cluster CA's key is, on a master; start one (see 'hamaster status')", cmp.Or(strings.Join(down, ", "), "none listed"))
	}
	var errs []error
	refused := true // every master refused for what only the operator can change
	for _, r := range rs {
		creds, err := f.issueClientOn(ctx, r, req)
		if err == nil {
			return creds, nil
		}
		if errors.Is(err, errkind.InvalidArgument) {
			return flavors.ClientCredentials{}, err // the same on every master
		}
		errs = append(errs, err)
		refused = refused && errors.Is(err, errkind.FailedPrecondition)
		if ctx.Err() != nil {
			break
		}
	}
	kind := errkind.Unavailable
	if refused {
		kind = errkind.FailedPrecondition
	}
	return flavors.ClientCredentials{}, errkind.Errorf(kind, "no running master issued the client certificate: %w", errors.Join(errs...))
}

// issueClientOn runs kubeadm kubeconfig user on master r.
func (f *Flavor) issueClientOn(ctx context.Context, r providers.Replica, req flavors.ClientRequest) (flavors.ClientCredentials, error) {
	doc, cfg, err := f.ClusterConfigurationOf(ctx, r.Name)
	if err != nil {
		return flavors.ClientCredentials{}, fmt.Errorf("master %s: %w (kubectl there reads it through /etc/kubernetes/admin.conf: is the apiserver that names up?)", r.Name, err)
	}
	groups := req.Groups
	if groups == nil {
		if groups, err = AdminGroups(cfg.KubernetesVersion); err != nil {
			return flavors.ClientCredentials{}, fmt.Errorf("master %s: %w; pass --group", r.Name, err)
		}
	}
	server := f.p.APIServerURL(r)
	if cfg.ControlPlaneEndpoint != "" {
		if server, err = EndpointURL(cfg.ControlPlaneEndpoint); err != nil {
			return flavors.ClientCredentials{}, fmt.Errorf("master %s: kubeadm-config's controlPlaneEndpoint: %w", r.Name, err)
		}
	}
	cmd, err := UserCommand(doc, req.User, groups, req.Validity)
	if err != nil {
		return flavors.ClientCredentials{}, fmt.Errorf("master %s: %w", r.Name, err)
	}
	// Bounds what kubeadm may issue: it backdates NotBefore, not NotAfter.
	latest := time.Now().Add(req.Validity + time.Minute)
	f.log.Info("kubeadm kubeconfig user", "master", r.Name, "user", req.User, "groups", groups, "validity", req.Validity)
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), r.Name, cmd)
	if err != nil {
		if s := err.Error(); strings.Contains(s, "CA files couldn't be loaded") || strings.Contains(s, "ca.key") {
			return flavors.ClientCredentials{}, errkind.Errorf(errkind.FailedPrecondition, "master %s: kubeadm kubeconfig user: the cluster CA's key (%s) is not readable there (kubeadm's external CA mode keeps it off the masters): put it back, or issue the certificate where the CA key is kept: %w", r.Name, CAKey, err)
		}
		return flavors.ClientCredentials{}, fmt.Errorf("master %s: kubeadm kubeconfig user: %w", r.Name, err)
	}
	kc, err := ParseUserKubeconfig(out)
	if err != nil {
		return flavors.ClientCredentials{}, fmt.Errorf("master %s: %w", r.Name, err)
	}
	if err := CheckUserCertificate(kc, req.User, groups, latest); err != nil {
		return flavors.ClientCredentials{}, fmt.Errorf("master %s: what kubeadm kubeconfig user issued: %w", r.Name, err)
	}
	return flavors.ClientCredentials{CACertPEM: kc.CACertPEM, CertPEM: kc.CertPEM, KeyPEM: kc.KeyPEM, Groups: groups, Server: server, Master: r.Name}, nil
}
