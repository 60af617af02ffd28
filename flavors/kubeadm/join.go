package kubeadm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/hamaster/hamaster/certs"
)

// tokenRE is a bootstrap token's form, as kubeadm validates it
// (k8s.io/cluster-bootstrap/token/api BootstrapTokenPattern:
// [a-z0-9]{6}.[a-z0-9]{16}).
var tokenRE = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// tokenChars are the characters of a bootstrap token
// (cluster-bootstrap/token/util GenerateBootstrapToken's alphabet).
const tokenChars = "0123456789abcdefghijklmnopqrstuvwxyz"

// NewToken makes a bootstrap token ID.secret, as `kubeadm token generate`
// does. hamaster makes the token itself and gives it to `kubeadm token
// create TOKEN`, so it knows the token without reading kubeadm's output.
func NewToken() (string, error) {
	b := make([]byte, 0, 23)
	for i := range 22 {
		if i == 6 {
			b = append(b, '.')
		}
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(tokenChars))))
		if err != nil {
			return "", fmt.Errorf("bootstrap token: %w", err)
		}
		b = append(b, tokenChars[n.Int64()])
	}
	return string(b), nil
}

// NewCertificateKey makes the key `kubeadm init phase upload-certs
// --certificate-key` encrypts the kubeadm-certs Secret with and `kubeadm
// join --control-plane --certificate-key` decrypts it with: 32 random
// bytes, hex (cmd/kubeadm/app/phases/copycerts CreateCertificateKey).
func NewCertificateKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("certificate key: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// CACertHash is the --discovery-token-ca-cert-hash of the cluster CA in
// caPEM (/etc/kubernetes/pki/ca.crt): "sha256:" and the hex SHA-256 of
// its Subject Public Key Info (cmd/kubeadm/app/util/pubkeypin Hash).
func CACertHash(caPEM []byte) (string, error) {
	c, err := certs.ParseCertPEM(caPEM)
	if err != nil {
		return "", fmt.Errorf("parse the cluster CA: %w", err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Join is one `kubeadm join --control-plane` of a new master, as
// `kubeadm token create --print-join-command` prints it plus the
// control-plane flags (kubeadm's docs: "Steps for the rest of the
// control plane nodes").
type Join struct {
	// Endpoint is the cluster's endpoint, host:port: the
	// controlPlaneEndpoint, which kubeadm join's discovery reads
	// cluster-info from (cmd/kubeadm/app/discovery/token).
	Endpoint string
	Token    string
	// CAHash pins the cluster CA (CACertHash).
	CAHash string
	// CertificateKey decrypts the kubeadm-certs Secret.
	CertificateKey string
	// NodeName is the new master's Node (--node-name), its replica name.
	NodeName string
	// AdvertiseAddress is the new master's own apiserver and etcd address
	// (--apiserver-advertise-address), its replica address.
	AdvertiseAddress string
	// BindPort is the new master's apiserver port
	// (--apiserver-bind-port; kubeadm's default 6443).
	BindPort int
	// IgnorePreflightErrors lists kubeadm preflight checks not to fail on
	// (--ignore-preflight-errors), "" for none.
	IgnorePreflightErrors []string
}

// Validate refuses a join kubeadm would refuse, naming the field.
func (j Join) Validate() error {
	if _, _, err := net.SplitHostPort(j.Endpoint); err != nil {
		return fmt.Errorf("join: endpoint %q: want host:port: %w", j.Endpoint, err)
	}
	if !tokenRE.MatchString(j.Token) {
		return fmt.Errorf("join: token: want [a-z0-9]{6}.[a-z0-9]{16}")
	}
	if h, ok := strings.CutPrefix(j.CAHash, "sha256:"); !ok || len(h) != 64 {
		return fmt.Errorf("join: CA hash %q: want sha256:<64 hex digits>", j.CAHash)
	}
	if k, err := hex.DecodeString(j.CertificateKey); err != nil || len(k) != 32 {
		return fmt.Errorf("join: certificate key: want 64 hex digits (32 bytes)")
	}
	if j.NodeName == "" {
		return fmt.Errorf("join: node name is empty")
	}
	if net.ParseIP(j.AdvertiseAddress) == nil {
		return fmt.Errorf("join: advertise address %q: want an IP address", j.AdvertiseAddress)
	}
	if j.BindPort < 1 || j.BindPort > 65535 {
		return fmt.Errorf("join: bind port %d: want 1-65535", j.BindPort)
	}
	return nil
}

// Args are the kubeadm command's arguments, after "kubeadm".
func (j Join) Args() []string {
	a := []string{"join", j.Endpoint,
		"--token", j.Token,
		"--discovery-token-ca-cert-hash", j.CAHash,
		"--control-plane",
		"--certificate-key", j.CertificateKey,
		"--node-name", j.NodeName,
		"--apiserver-advertise-address", j.AdvertiseAddress,
		"--apiserver-bind-port", strconv.Itoa(j.BindPort),
	}
	if len(j.IgnorePreflightErrors) > 0 {
		a = append(a, "--ignore-preflight-errors", strings.Join(j.IgnorePreflightErrors, ","))
	}
	return a
}

// Redacted is the command as a log or an error may show it: the token's
// secret half and the certificate key replaced by "<redacted>".
func (j Join) Redacted() string {
	a := j.Args()
	for i := 1; i < len(a); i++ {
		switch a[i-1] {
		case "--token":
			if m := tokenRE.FindStringSubmatch(a[i]); m != nil {
				a[i] = m[1] + ".<redacted>"
			}
		case "--certificate-key":
			a[i] = "<redacted>"
		}
	}
	return "kubeadm " + strings.Join(a, " ")
}
