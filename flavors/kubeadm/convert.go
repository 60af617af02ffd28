package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

var _ flavors.EndpointMover = (*Flavor)(nil)

// Files of the conversion on a master (kubeadm's constants:
// APIServerCertAndKeyBaseName; hamaster's own under /var/lib/hamaster).
const (
	APIServerCert = "/etc/kubernetes/pki/apiserver.crt"
	APIServerKey  = "/etc/kubernetes/pki/apiserver.key"
	// certBackupDir keeps the apiserver pair a reissue replaced, until the
	// next reissue: what an operator restores by hand if the new one is
	// wrong.
	certBackupDir = "/var/lib/hamaster/apiserver-cert-backup"
	// reissueConfig is the kubeadm configuration the reissue runs with.
	reissueConfig = "/var/lib/hamaster/apiserver-cert-kubeadm.yaml"
)

// ServingCertReload bounds the wait until a master's apiserver serves a
// reissued certificate: kube-apiserver reloads --tls-cert-file and
// --tls-private-key-file when they change on disk
// (k8s.io/apiserver/pkg/server/dynamiccertificates
// DynamicCertKeyPairContent: an fsnotify watch, and a re-read every
// minute), with no restart.
const ServingCertReload = 90 * time.Second

// Endpoint implements flavors.EndpointMover: kubeadm-config's
// controlPlaneEndpoint, read through a running master.
func (f *Flavor) Endpoint(ctx context.Context) (string, error) {
	src, err := f.running(ctx)
	if err != nil {
		return "", err
	}
	if len(src) == 0 {
		return "", errkind.Errorf(errkind.FailedPrecondition, "no running master to read kubeadm-config through")
	}
	_, cfg, err := f.ClusterConfigurationOf(ctx, src[0].Name)
	if err != nil {
		return "", err
	}
	return cfg.ControlPlaneEndpoint, nil
}

// certSANs are the names and addresses an x509 certificate is valid for.
func certSANs(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// sameSAN reports whether two SAN strings name the same thing (IPs
// compared as addresses).
func sameSAN(a, b string) bool {
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(a, b)
}

// MissingSANs are the hosts a certificate with sans does not name.
func MissingSANs(sans []string, hosts ...string) []string {
	var out []string
	for _, h := range hosts {
		if !slices.ContainsFunc(sans, func(s string) bool { return sameSAN(s, h) }) {
			out = append(out, h)
		}
	}
	return out
}

// parseCert is the first certificate of a PEM file.
func parseCert(pemBytes []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// ReissueConfig is the kubeadm configuration `kubeadm init phase certs
// apiserver` reissues a master's apiserver certificate from: the
// cluster's own ClusterConfiguration (kubeadm-config: serviceSubnet,
// dnsDomain, controlPlaneEndpoint, certSANs) with certSANs gaining every
// name of extra, and an InitConfiguration with the master's own
// advertise address and node name — what kubeadm's GetAPIServerAltNames
// (cmd/kubeadm/app/util/pkiutil/pki_helpers.go) puts in the certificate
// besides certSANs.
func ReissueConfig(clusterConfig []byte, nodeName, advertiseAddress string, extra []string) ([]byte, error) {
	cc, err := ParseClusterConfiguration(clusterConfig)
	if err != nil {
		return nil, err
	}
	doc, _, err := AddCertSANs(clusterConfig, extra)
	if err != nil {
		return nil, err
	}
	init := fmt.Sprintf("apiVersion: %s\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: %s\n  bindPort: %d\nnodeRegistration:\n  name: %s\n",
		cc.APIVersion, advertiseAddress, DefaultBindPort, nodeName)
	return []byte(init + "---\n" + string(doc)), nil
}

// AddServingSANs implements flavors.EndpointMover: replica's apiserver
// certificate reissued by the real kubeadm (`kubeadm init phase certs
// apiserver`, which keeps an existing pair as it is: the old one is
// moved aside into certBackupDir first) from the masters' own CA, with
// every name it had plus hosts; a reissue that fails, or whose
// certificate drops a name, is undone. Then it waits until the apiserver
// serves the new certificate (reloaded from disk, no restart).
func (f *Flavor) AddServingSANs(ctx context.Context, replica providers.Replica, hosts ...string) error {
	cur, err := f.read(ctx, replica.Name, APIServerCert)
	if err != nil {
		return err
	}
	cert, err := parseCert(cur[0])
	if err != nil {
		return fmt.Errorf("master %s: %s: %w", replica.Name, APIServerCert, err)
	}
	old := certSANs(cert)
	if len(MissingSANs(old, hosts...)) > 0 {
		if err := f.reissue(ctx, replica, old, hosts); err != nil {
			return err
		}
	}
	return f.waitServing(ctx, replica, hosts)
}

func (f *Flavor) reissue(ctx context.Context, replica providers.Replica, old, hosts []string) error {
	src, _, err := f.ClusterConfigurationOf(ctx, replica.Name)
	if err != nil {
		return err
	}
	node := f.m.MachineHostname(replica.Name, replica.Address)
	// Every old name stays: certSANs gains those kubeadm would not derive
	// itself (a hand-added SAN, the old endpoint's host).
	var extra []string
	for _, s := range append(slices.Clone(old), hosts...) {
		if strings.HasPrefix(s, "kubernetes") || sameSAN(s, node) || sameSAN(s, replica.Address) {
			continue
		}
		extra = append(extra, s)
	}
	cfg, err := ReissueConfig(src, node, replica.Address, extra)
	if err != nil {
		return fmt.Errorf("master %s: %w", replica.Name, err)
	}
	if err := f.write(ctx, replica.Name, reissueConfig, cfg, 0o600); err != nil {
		return fmt.Errorf("master %s: write %s: %w", replica.Name, reissueConfig, err)
	}
	// One script, safe to run again after a crash at any line: a pair
	// missing from pki is first restored from the backup.
	script := strings.Join([]string{
		"set -e",
		"b=" + certBackupDir,
		"mkdir -p $b",
		fmt.Sprintf("if [ ! -f %s ] && [ -f $b/apiserver.crt ]; then cp -p $b/apiserver.crt %s; cp -p $b/apiserver.key %s; fi", APIServerCert, APIServerCert, APIServerKey),
		fmt.Sprintf("cp -p %s %s $b/", APIServerCert, APIServerKey),
		fmt.Sprintf("rm -f %s %s", APIServerCert, APIServerKey),
		fmt.Sprintf("if ! kubeadm init phase certs apiserver --config %s; then cp -p $b/apiserver.crt %s; cp -p $b/apiserver.key %s; exit 1; fi", reissueConfig, APIServerCert, APIServerKey),
	}, "\n")
	f.log.Info("kubeadm init phase certs apiserver", "master", replica.Name, "adds", hosts)
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "sh -c "+remote.ShellQuote(script)); err != nil {
		return fmt.Errorf("master %s: reissue the apiserver certificate: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	got, err := f.read(ctx, replica.Name, APIServerCert)
	if err != nil {
		return err
	}
	nc, err := parseCert(got[0])
	if err == nil {
		if lost := MissingSANs(certSANs(nc), append(old, hosts...)...); len(lost) > 0 {
			err = fmt.Errorf("the reissued certificate lacks %v", lost)
		}
	}
	if err != nil {
		restore := fmt.Sprintf("cp -p %s/apiserver.crt %s && cp -p %s/apiserver.key %s", certBackupDir, APIServerCert, certBackupDir, APIServerKey)
		if _, _, rerr := f.m.RunOnMachine(ctx, replica.Name, restore); rerr != nil {
			return fmt.Errorf("master %s: %w; restoring the old pair failed too: %v", replica.Name, err, rerr)
		}
		return fmt.Errorf("master %s: %w (the old pair is back)", replica.Name, err)
	}
	return nil
}

// waitServing waits until replica's apiserver serves a certificate that
// names hosts.
func (f *Flavor) waitServing(ctx context.Context, replica providers.Replica, hosts []string) error {
	addr := net.JoinHostPort(replica.Address, strconv.Itoa(DefaultBindPort))
	wctx, cancel := context.WithTimeout(ctx, ServingCertReload)
	defer cancel()
	var last error
	err := wait.Until(wctx, 250*time.Millisecond, "the apiserver of "+replica.Name+" to serve the reissued certificate", func() (bool, error) {
		conn, err := f.m.DialMachine(wctx, replica.Name, addr)
		if err != nil {
			last = err
			return false, nil
		}
		defer conn.Close()
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) // only the SANs are read, not trusted
		if err := tc.HandshakeContext(wctx); err != nil {
			last = err
			return false, nil
		}
		peer := tc.ConnectionState().PeerCertificates
		if len(peer) == 0 {
			return false, nil
		}
		missing := MissingSANs(certSANs(peer[0]), hosts...)
		last = fmt.Errorf("it serves a certificate without %v", missing)
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("master %s: %w (last: %v)", replica.Name, err, last)
	}
	return nil
}

// PointMaster implements flavors.EndpointMover: admin.conf and
// super-admin.conf (the operator's and kubeadm's own clients) on replica
// move to endpoint. kubelet.conf moves only when it names the cluster's
// old endpoint: one that names the master's own apiserver stays, as
// kubeadm itself writes it on control-plane nodes since v1.33
// (ControlPlaneKubeletLocalMode, beta and on by default: KEP-4471, so
// that a kubelet never talks to a newer apiserver), and so does
// controller-manager.conf and scheduler.conf (the local apiserver since
// v1.29). A moved kubelet.conf restarts the kubelet.
func (f *Flavor) PointMaster(ctx context.Context, replica providers.Replica, endpoint string) error {
	local := "https://" + net.JoinHostPort(replica.Address, strconv.Itoa(DefaultBindPort))
	for _, name := range EndpointKubeconfigs {
		path := "/etc/kubernetes/" + name
		out, _, err := f.m.RunOnMachine(ctx, replica.Name, "cat "+path+" 2>/dev/null || true")
		if err != nil {
			return fmt.Errorf("master %s: read %s: %w", replica.Name, path, err)
		}
		if len(strings.TrimSpace(string(out))) == 0 {
			continue // super-admin.conf is only on the master kubeadm init built
		}
		if name == "kubelet.conf" {
			srv, err := KubeconfigServer(out)
			if err != nil {
				return fmt.Errorf("master %s: %s: %w", replica.Name, path, err)
			}
			if srv == local || strings.HasPrefix(srv, "https://127.0.0.1:") || strings.HasPrefix(srv, "https://localhost:") {
				continue
			}
		}
		doc, changed, err := SetKubeconfigServer(out, endpoint)
		if err != nil {
			return fmt.Errorf("master %s: %s: %w", replica.Name, path, err)
		}
		if !changed {
			continue
		}
		if err := f.write(ctx, replica.Name, path, doc, 0o600); err != nil {
			return fmt.Errorf("master %s: write %s: %w", replica.Name, path, err)
		}
		f.log.Info("kubeconfig moved to the endpoint", "master", replica.Name, "file", path, "server", endpoint)
		if name == "kubelet.conf" {
			if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "systemctl restart kubelet"); err != nil {
				return fmt.Errorf("master %s: restart the kubelet for its new kubelet.conf: %w (stderr: %s)", replica.Name, err, tail(stderr))
			}
		}
	}
	return nil
}

// SetEndpoint implements flavors.EndpointMover: kube-system/kubeadm-config's
// controlPlaneEndpoint (and certSANs gaining its host, so that a later
// kubeadm upgrade or certs renew keeps the name: kubeadm#1447) and
// kube-public/cluster-info's server (what `kubeadm join` discovery
// reads), each replaced with its resourceVersion (a concurrent change
// fails the replace instead of being overwritten).
func (f *Flavor) SetEndpoint(ctx context.Context, endpoint string) error {
	ep, err := SplitEndpoint(endpoint)
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "endpoint %q: %v", endpoint, err)
	}
	src, err := f.running(ctx)
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "no running master to record the endpoint through")
	}
	master := src[0].Name
	if err := f.editConfigMap(ctx, master, "kube-system", "kubeadm-config", "ClusterConfiguration", func(doc []byte) ([]byte, bool, error) {
		cc, err := ParseClusterConfiguration(doc)
		if err != nil {
			return nil, false, err
		}
		keep := []string{ep.Host}
		if old, err := SplitEndpoint(cc.ControlPlaneEndpoint); err == nil && cc.ControlPlaneEndpoint != "" {
			keep = append(keep, old.Host) // clients of the old endpoint keep verifying
		}
		return SetControlPlaneEndpoint(doc, endpoint, keep)
	}); err != nil {
		return err
	}
	return f.editConfigMap(ctx, master, "kube-public", "cluster-info", "kubeconfig", func(doc []byte) ([]byte, bool, error) {
		return SetKubeconfigServer(doc, "https://"+endpoint)
	})
}

// editConfigMap rewrites one key of a ConfigMap through master's
// admin.conf with kubectl replace, guarded by the resourceVersion read.
func (f *Flavor) editConfigMap(ctx context.Context, master, ns, name, key string, edit func([]byte) ([]byte, bool, error)) error {
	out, stderr, err := f.m.RunOnMachine(ctx, master, adminKubectl+"-n "+ns+" get configmap "+name+" -o json")
	if err != nil {
		return fmt.Errorf("read %s/%s on %s: %w (stderr: %s)", ns, name, master, err, tail(stderr))
	}
	var cm map[string]any
	if err := json.Unmarshal(out, &cm); err != nil {
		return fmt.Errorf("%s/%s: %w", ns, name, err)
	}
	data, _ := cm["data"].(map[string]any)
	doc, _ := data[key].(string)
	if doc == "" {
		return fmt.Errorf("%s/%s has no %s", ns, name, key)
	}
	nd, changed, err := edit([]byte(doc))
	if err != nil {
		return fmt.Errorf("%s/%s %s: %w", ns, name, key, err)
	}
	if !changed {
		return nil
	}
	data[key] = string(nd)
	body, err := json.Marshal(cm)
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("/var/lib/hamaster/%s-%s.json", ns, name)
	if err := f.write(ctx, master, tmp, body, 0o600); err != nil {
		return err
	}
	if _, stderr, err := f.m.RunOnMachine(ctx, master, adminKubectl+"replace -f "+tmp+" && rm -f "+tmp); err != nil {
		return fmt.Errorf("replace %s/%s on %s: %w (stderr: %s)", ns, name, master, err, tail(stderr))
	}
	f.log.Info("configmap updated", "configmap", ns+"/"+name, "key", key)
	return nil
}

// write puts data at path on machine atomically (a temporary file
// renamed over it), with mode, over the provider's RunOnMachine: the
// only way in every provider gives.
func (f *Flavor) write(ctx context.Context, machine, path string, data []byte, mode os.FileMode) error {
	dir := path[:strings.LastIndex(path, "/")+1]
	tmp := path + ".hamaster-tmp"
	cmd := fmt.Sprintf("mkdir -p %s && printf %%s %s | base64 -d > %s && chmod %o %s && mv -f %s %s",
		remote.ShellQuote(dir), base64.StdEncoding.EncodeToString(data), remote.ShellQuote(tmp), mode.Perm(), remote.ShellQuote(tmp), remote.ShellQuote(tmp), remote.ShellQuote(path))
	if _, stderr, err := f.m.RunOnMachine(ctx, machine, cmd); err != nil {
		return fmt.Errorf("%w (stderr: %s)", err, tail(stderr))
	}
	return nil
}
