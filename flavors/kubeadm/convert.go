package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/certs"
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
	// certStagingDir is where kubeadm writes the reissued pair (with a
	// copy of the CA, removed once it is done), before it is installed.
	certStagingDir = "/var/lib/hamaster/apiserver-cert-staging"
	// CAKey is the masters' CA key (cmd/kubeadm/app/constants
	// CACertAndKeyBaseName).
	CAKey = "/etc/kubernetes/pki/ca.key"
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
	master, err := f.firstRunning(ctx, "read kubeadm-config through")
	if err != nil {
		return "", err
	}
	_, cfg, err := f.ClusterConfigurationOf(ctx, master)
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

// ReissueConfig is the kubeadm configuration `kubeadm init phase certs
// apiserver` reissues a master's apiserver certificate from: the
// cluster's own ClusterConfiguration (kubeadm-config: serviceSubnet,
// dnsDomain, controlPlaneEndpoint, certSANs) with certSANs gaining every
// name of extra and certificatesDir set to certDir (where the phase
// finds the CA and writes the pair), and an InitConfiguration with the
// master's own advertise address and node name — what kubeadm's
// GetAPIServerAltNames (cmd/kubeadm/app/util/pkiutil/pki_helpers.go)
// puts in the certificate besides certSANs.
func ReissueConfig(clusterConfig []byte, nodeName, advertiseAddress, certDir string, extra []string) ([]byte, error) {
	cc, err := ParseClusterConfiguration(clusterConfig)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(advertiseAddress) == nil || nodeName == "" || !strings.HasPrefix(certDir, "/") {
		return nil, fmt.Errorf("reissue config: advertise address %q, node name %q, certificates dir %q: want an IP, a name and an absolute path", advertiseAddress, nodeName, certDir)
	}
	doc, _, err := editClusterConfiguration(clusterConfig, func(top *yaml.Node) (bool, error) {
		addCertSANs(top, extra)
		setMapValue(top, "certificatesDir", scalar(certDir))
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	init := fmt.Sprintf("apiVersion: %s\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: %s\n  bindPort: %d\nnodeRegistration:\n  name: %s\n",
		cc.APIVersion, advertiseAddress, DefaultBindPort, nodeName)
	return []byte(init + "---\n" + string(doc)), nil
}

// AddServingSANs implements flavors.EndpointMover: replica's apiserver
// certificate reissued by the real kubeadm from the masters' own CA,
// with every name it had plus hosts, then waits until the apiserver
// serves it.
//
// kubeadm never replaces an existing pair: `kubeadm init phase certs
// apiserver` (cmd/kubeadm/app/cmd/phases/init/certs.go runCertPhase)
// keeps a pair it finds on disk as it is ("Using existing apiserver
// certificate and key on disk"), whatever names it lacks (checked with
// the real kubeadm of every pinned version: realkubeadm_test.go). So
// the phase runs with certificatesDir
// a staging directory holding only a copy of the CA; its certificate is
// checked (every old name and every new one, the same CA) before it is
// installed; the installed pair is first copied to certBackupDir. The
// pki files are replaced by rename, never removed: the running
// apiserver always finds a pair, and reloads the new one without a
// restart (k8s.io/apiserver/pkg/server/dynamiccertificates
// DynamicCertKeyPairContent: an fsnotify watch of --tls-cert-file and
// --tls-private-key-file, a Rename re-adds the watch; a cert and key
// that do not match yet are retried, not served).
func (f *Flavor) AddServingSANs(ctx context.Context, replica providers.Replica, hosts ...string) error {
	cur, err := f.read(ctx, replica.Name, APIServerCert)
	if err != nil {
		return err
	}
	cert, err := certs.ParseCertPEM(cur[0])
	if err != nil {
		return fmt.Errorf("master %s: %s: %w", replica.Name, APIServerCert, err)
	}
	old := certSANs(cert)
	if len(MissingSANs(old, hosts...)) > 0 {
		if err := f.reissue(ctx, replica, cert, hosts); err != nil {
			return err
		}
	}
	return f.waitServing(ctx, replica, hosts)
}

// ManifestFlag is the value of --name in a static pod manifest's
// command ("" when absent).
func ManifestFlag(manifest []byte, name string) string {
	for _, line := range strings.Split(string(manifest), "\n") {
		l := strings.Trim(strings.TrimPrefix(strings.TrimSpace(line), "- "), `"'`)
		if v, ok := strings.CutPrefix(l, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func (f *Flavor) reissue(ctx context.Context, replica providers.Replica, old *x509.Certificate, hosts []string) error {
	src, _, err := f.ClusterConfigurationOf(ctx, replica.Name)
	if err != nil {
		return err
	}
	files, err := f.read(ctx, replica.Name, APIServerManifest, CACert)
	if err != nil {
		return err
	}
	// The master's advertise address as its apiserver runs with it.
	advertise := ManifestFlag(files[0], "advertise-address")
	if advertise == "" {
		advertise = replica.Address
	}
	node := f.m.MachineHostname(replica.Name, replica.Address)
	oldSANs := certSANs(old)
	cfg, err := ReissueConfig(src, node, advertise, certStagingDir, ReissueSANs(oldSANs, hosts, node, advertise))
	if err != nil {
		return fmt.Errorf("master %s: %w", replica.Name, err)
	}
	if err := f.write(ctx, replica.Name, reissueConfig, cfg, 0o600); err != nil {
		return fmt.Errorf("master %s: write %s: %w", replica.Name, reissueConfig, err)
	}
	stage := strings.Join([]string{
		"set -e", "umask 077",
		"rm -rf " + certStagingDir, "mkdir -p " + certStagingDir,
		fmt.Sprintf("cp %s %s %s/", CACert, CAKey, certStagingDir),
		"kubeadm init phase certs apiserver --config " + reissueConfig,
		fmt.Sprintf("rm -f %s/ca.key", certStagingDir),
	}, "\n")
	f.log.Info("kubeadm init phase certs apiserver", "master", replica.Name, "adds", hosts, "dir", certStagingDir)
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "sh -c "+remote.ShellQuote(stage)); err != nil {
		f.m.RunOnMachine(ctx, replica.Name, "rm -rf "+certStagingDir) //nolint:errcheck // best effort: the CA key copy
		return fmt.Errorf("master %s: kubeadm init phase certs apiserver: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	staged, err := f.read(ctx, replica.Name, certStagingDir+"/apiserver.crt")
	if err != nil {
		return err
	}
	if err := CheckReissued(staged[0], files[1], oldSANs, hosts); err != nil {
		f.m.RunOnMachine(ctx, replica.Name, "rm -rf "+certStagingDir) //nolint:errcheck // the installed pair is untouched
		return fmt.Errorf("master %s: the reissued apiserver certificate: %w (the installed one is kept)", replica.Name, err)
	}
	// Install: the old pair backed up, then key and certificate renamed
	// over the old ones (between the two renames the pair does not
	// match: the apiserver keeps serving the old one until both are in).
	install := strings.Join([]string{
		"set -e", "umask 077",
		"mkdir -p " + certBackupDir,
		fmt.Sprintf("cp -p %s %s %s/", APIServerCert, APIServerKey, certBackupDir),
		fmt.Sprintf("cp %s/apiserver.key %s.hamaster-tmp", certStagingDir, APIServerKey),
		fmt.Sprintf("cp %s/apiserver.crt %s.hamaster-tmp", certStagingDir, APIServerCert),
		fmt.Sprintf("chmod 600 %s.hamaster-tmp; chmod 644 %s.hamaster-tmp", APIServerKey, APIServerCert),
		fmt.Sprintf("mv -f %s.hamaster-tmp %s", APIServerKey, APIServerKey),
		fmt.Sprintf("mv -f %s.hamaster-tmp %s", APIServerCert, APIServerCert),
		"rm -rf " + certStagingDir,
	}, "\n")
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "sh -c "+remote.ShellQuote(install)); err != nil {
		return fmt.Errorf("master %s: install the reissued apiserver certificate: %w (stderr: %s; the old pair is in %s)", replica.Name, err, tail(stderr), certBackupDir)
	}
	f.log.Info("apiserver certificate reissued", "master", replica.Name, "backup", certBackupDir)
	return nil
}

// ReissueSANs are the certSANs a reissue adds to the cluster's: every
// old name of the certificate kubeadm would not derive itself (a
// hand-added SAN, the old endpoint's host; not the kubernetes service
// names, the node name or the advertise address), and hosts.
func ReissueSANs(old, hosts []string, node, advertise string) []string {
	var extra []string
	for _, s := range append(slices.Clone(old), hosts...) {
		if strings.HasPrefix(s, "kubernetes") || sameSAN(s, node) || sameSAN(s, advertise) || slices.Contains(extra, s) {
			continue
		}
		extra = append(extra, s)
	}
	return extra
}

// CheckReissued verifies a reissued apiserver certificate (PEM) before
// it is installed: signed by the masters' CA (caPEM), and naming every
// name of old and of hosts.
func CheckReissued(certPEM, caPEM []byte, old, hosts []string) error {
	c, err := certs.ParseCertPEM(certPEM)
	if err != nil {
		return err
	}
	ca, err := certs.ParseCertPEM(caPEM)
	if err != nil {
		return fmt.Errorf("the CA: %w", err)
	}
	if err := c.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("not signed by the masters' CA: %w", err)
	}
	if lost := MissingSANs(certSANs(c), append(slices.Clone(old), hosts...)...); len(lost) > 0 {
		return fmt.Errorf("it lacks %v", lost)
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
	start := time.Now()
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
	f.log.Info("the apiserver serves the certificate", "master", replica.Name, "names", hosts, "waited", time.Since(start).Round(time.Millisecond))
	return nil
}

// PointMaster implements flavors.EndpointMover: admin.conf and
// super-admin.conf (the operator's and kubeadm's own clients) on replica
// move to endpoint, each written atomically. kubelet.conf moves only
// when it names something else than the master's own apiserver (the
// cluster's old endpoint): a control-plane kubelet talks to its local
// apiserver with ControlPlaneKubeletLocalMode (KEP-4471; beta and on by
// default since v1.33), and kubeadm upgrade itself moves kubelet.conf
// from the controlPlaneEndpoint back to the local apiserver
// (cmd/kubeadm/app/phases/upgrade/postupgrade.go UpdateKubeletLocalMode),
// so pointing it at the VIP would be undone by the next upgrade. A
// master built without controlPlaneEndpoint has kubelet.conf on its own
// address: it stays, and the kubelet is not restarted.
// controller-manager.conf and scheduler.conf name the local apiserver
// (cmd/kubeadm/app/phases/kubeconfig getKubeConfigSpecsBase:
// LocalAPIEndpoint since v1.29) and stay too. A moved kubelet.conf
// restarts the kubelet (systemctl restart kubelet), which must keep the
// master's pods running.
func (f *Flavor) PointMaster(ctx context.Context, replica providers.Replica, endpoint string) error {
	if _, _, err := SetKubeconfigServer(minimalKubeconfig, endpoint); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "master %s: %v", replica.Name, err)
	}
	local := localServer(replica)
	for _, name := range EndpointKubeconfigs {
		path := KubernetesDir + "/" + name
		out, err := f.readIfExists(ctx, replica.Name, path)
		if err != nil {
			return err
		}
		if len(out) == 0 {
			continue // super-admin.conf is only on the master kubeadm init built
		}
		srv, err := KubeconfigServer(out)
		if err != nil {
			return fmt.Errorf("master %s: %s: %w", replica.Name, path, err)
		}
		if !KubeconfigMoves(name, srv, local, endpoint) {
			continue
		}
		doc, changed, err := SetKubeconfigServer(out, endpoint)
		if err != nil {
			return fmt.Errorf("master %s: %s: %w", replica.Name, path, err)
		}
		if !changed {
			continue
		}
		if name == "kubelet.conf" {
			// Marked before the file changes: a PointMaster that stops
			// before the restart finds the mark and restarts then.
			if err := f.write(ctx, replica.Name, kubeletRestartMark, []byte(endpoint+"\n"), 0o600); err != nil {
				return fmt.Errorf("master %s: write %s: %w", replica.Name, kubeletRestartMark, err)
			}
		}
		if err := f.write(ctx, replica.Name, path, doc, 0o600); err != nil {
			return fmt.Errorf("master %s: write %s: %w", replica.Name, path, err)
		}
		f.log.Info("kubeconfig moved to the endpoint", "master", replica.Name, "file", path, "server", endpoint)
	}
	return f.restartKubeletIfMarked(ctx, replica)
}

// kubeletRestartMark on a master says its kubelet.conf moved and the
// kubelet has not been restarted since.
const kubeletRestartMark = "/var/lib/hamaster/kubelet-restart-pending"

// restartKubeletIfMarked restarts replica's kubelet when
// kubeletRestartMark is there, then removes the mark.
func (f *Flavor) restartKubeletIfMarked(ctx context.Context, replica providers.Replica) error {
	mark, err := f.readIfExists(ctx, replica.Name, kubeletRestartMark)
	if err != nil || len(mark) == 0 {
		return err
	}
	f.log.Info("systemctl restart kubelet", "master", replica.Name, "for", "kubelet.conf on "+strings.TrimSpace(string(mark)))
	if err := f.restartKubelet(ctx, replica.Name); err != nil {
		return fmt.Errorf("master %s: restart the kubelet for its new kubelet.conf: %w", replica.Name, err)
	}
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "rm -f "+kubeletRestartMark); err != nil {
		return fmt.Errorf("master %s: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	return nil
}

// KubernetesDir is kubeadm's directory on a master
// (cmd/kubeadm/app/constants KubernetesDir).
const KubernetesDir = "/etc/kubernetes"

// minimalKubeconfig only validates a server URL with SetKubeconfigServer.
var minimalKubeconfig = []byte("clusters:\n- cluster:\n    server: https://x:1\n")

// localServer is replica's own apiserver as a kubeconfig names it.
func localServer(replica providers.Replica) string {
	return "https://" + net.JoinHostPort(replica.Address, strconv.Itoa(DefaultBindPort))
}

// KubeconfigMoves reports whether the kubeconfig name (under
// /etc/kubernetes) whose server is server moves to endpoint
// (https://host:port) on a master whose own apiserver is local: one of
// EndpointKubeconfigs not there yet, except a kubelet.conf on the local
// apiserver (PointMaster says why).
func KubeconfigMoves(name, server, local, endpoint string) bool {
	if !slices.Contains(EndpointKubeconfigs, name) || server == endpoint {
		return false
	}
	if name == "kubelet.conf" {
		u, err := url.Parse(server)
		if err != nil {
			return false
		}
		if server == local || u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost" || u.Hostname() == "::1" {
			return false
		}
	}
	return true
}

// MasterState is what the conversion reads on one master.
type MasterState struct {
	// SANs are the names and addresses its apiserver certificate names.
	SANs []string
	// Servers maps each kubeconfig of EndpointKubeconfigs present on it
	// to its server.
	Servers map[string]string
	// Local is its own apiserver: https://<advertise address>:6443.
	Local string
}

// Left is what remains of moving one master to an endpoint.
type Left struct {
	// SANs are the hosts its apiserver certificate lacks
	// (AddServingSANs).
	SANs []string
	// Kubeconfigs are the files PointMaster would move.
	Kubeconfigs []string
}

// Done reports whether nothing is left.
func (l Left) Done() bool { return len(l.SANs) == 0 && len(l.Kubeconfigs) == 0 }

// ConversionLeft is what remains to move a master in state s to
// endpoint (host:port): what AddServingSANs and PointMaster would still
// change, so that a resumed conversion names what it skips.
func ConversionLeft(s MasterState, endpoint string) (Left, error) {
	ep, err := SplitEndpoint(endpoint)
	if err != nil {
		return Left{}, err
	}
	if ep.Port == 0 {
		ep.Port = DefaultBindPort
	}
	l := Left{SANs: MissingSANs(s.SANs, ep.Host)}
	for _, name := range EndpointKubeconfigs {
		if srv, ok := s.Servers[name]; ok && KubeconfigMoves(name, srv, s.Local, "https://"+ep.String()) {
			l.Kubeconfigs = append(l.Kubeconfigs, name)
		}
	}
	return l, nil
}

// State reads replica's MasterState: its apiserver certificate's names
// and its kubeconfigs' servers. Read-only.
func (f *Flavor) State(ctx context.Context, replica providers.Replica) (MasterState, error) {
	s := MasterState{Servers: map[string]string{}, Local: localServer(replica)}
	b, err := f.read(ctx, replica.Name, APIServerCert)
	if err != nil {
		return s, err
	}
	c, err := certs.ParseCertPEM(b[0])
	if err != nil {
		return s, fmt.Errorf("master %s: %s: %w", replica.Name, APIServerCert, err)
	}
	s.SANs = certSANs(c)
	for _, name := range EndpointKubeconfigs {
		path := KubernetesDir + "/" + name
		out, err := f.readIfExists(ctx, replica.Name, path)
		if err != nil {
			return s, err
		}
		if len(out) == 0 {
			continue
		}
		if s.Servers[name], err = KubeconfigServer(out); err != nil {
			return s, fmt.Errorf("master %s: %s: %w", replica.Name, path, err)
		}
	}
	return s, nil
}

// readIfExists is the file at path on machine, nil when there is none.
func (f *Flavor) readIfExists(ctx context.Context, machine, path string) ([]byte, error) {
	q := remote.ShellQuote(path)
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), machine, "if [ -e "+q+" ]; then cat "+q+"; fi")
	if err != nil {
		return nil, fmt.Errorf("master %s: read %s: %w (stderr: %s)", machine, path, err, tail(stderr))
	}
	return out, nil
}

// SetEndpoint implements flavors.EndpointMover: kube-system/kubeadm-config's
// controlPlaneEndpoint (and certSANs gaining its host, so that a later
// kubeadm upgrade or certs renew keeps the name: kubeadm#1447) and
// kube-public/cluster-info's server (what `kubeadm join` discovery
// reads), each replaced with its resourceVersion (a concurrent change
// fails the replace instead of being overwritten). The endpoint it
// replaces is recorded as a former one (former.go).
func (f *Flavor) SetEndpoint(ctx context.Context, endpoint string) error {
	if _, err := SplitEndpoint(endpoint); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "endpoint %q: %v", endpoint, err)
	}
	master, err := f.firstRunning(ctx, "record the endpoint through")
	if err != nil {
		return err
	}
	if err := f.editConfigMapObject(ctx, master, "kube-system", "kubeadm-config", func(cm map[string]any) (bool, error) {
		return EditKubeadmConfigEndpoint(cm, endpoint)
	}); err != nil {
		return err
	}
	return f.editConfigMap(ctx, master, "kube-public", "cluster-info", "kubeconfig", func(doc []byte) ([]byte, bool, error) {
		return SetKubeconfigServer(doc, "https://"+endpoint)
	})
}

// EditKubeadmConfigEndpoint moves kube-system/kubeadm-config (cm, as
// `kubectl get -o json` decodes it) to endpoint (host:port):
// ClusterConfiguration's controlPlaneEndpoint set and its certSANs
// gaining the new host and keeping the old one (clients of the old
// endpoint keep verifying), and the endpoint it replaces added to
// AnnotationFormerEndpoints, in one object. It reports whether it
// changed cm; the same endpoint again changes nothing.
func EditKubeadmConfigEndpoint(cm map[string]any, endpoint string) (bool, error) {
	ep, err := SplitEndpoint(endpoint)
	if err != nil {
		return false, err
	}
	data, _ := cm["data"].(map[string]any)
	doc, _ := data["ClusterConfiguration"].(string)
	if doc == "" {
		return false, errors.New("kube-system/kubeadm-config has no ClusterConfiguration")
	}
	cc, err := ParseClusterConfiguration([]byte(doc))
	if err != nil {
		return false, fmt.Errorf("kube-system/kubeadm-config ClusterConfiguration: %w", err)
	}
	keep := []string{ep.Host}
	if old, err := SplitEndpoint(cc.ControlPlaneEndpoint); err == nil {
		keep = append(keep, old.Host)
	}
	nd, changed, err := SetControlPlaneEndpoint([]byte(doc), endpoint, keep)
	if err != nil {
		return false, fmt.Errorf("kube-system/kubeadm-config ClusterConfiguration: %w", err)
	}
	if changed {
		data["ClusterConfiguration"] = string(nd)
	}
	cur, _ := annotations(cm, false)[AnnotationFormerEndpoints].(string)
	switch next := FormerEndpointsAfter(cur, cc.ControlPlaneEndpoint, endpoint); {
	case next == cur:
	case next == "":
		delete(annotations(cm, false), AnnotationFormerEndpoints)
		changed = true
	default:
		annotations(cm, true)[AnnotationFormerEndpoints] = next
		changed = true
	}
	return changed, nil
}

// editConfigMap rewrites one key of a ConfigMap through master's
// admin.conf with kubectl replace, guarded by the resourceVersion read
// (the object replaced carries it: a concurrent change makes the
// replace fail with a Conflict). A conflict reads the object again and
// redoes the edit, at most configMapAttempts times: the edit is a pure
// function of what it reads, so it is safe to repeat.
func (f *Flavor) editConfigMap(ctx context.Context, master, ns, name, key string, edit func([]byte) ([]byte, bool, error)) error {
	return f.editConfigMapObject(ctx, master, ns, name, func(cm map[string]any) (bool, error) {
		data, _ := cm["data"].(map[string]any)
		doc, _ := data[key].(string)
		if doc == "" {
			return false, fmt.Errorf("%s/%s has no %s", ns, name, key)
		}
		nd, changed, err := edit([]byte(doc))
		if err != nil {
			return false, fmt.Errorf("%s/%s %s: %w", ns, name, key, err)
		}
		if changed {
			data[key] = string(nd)
		}
		return changed, nil
	})
}

// editConfigMapObject is editConfigMap with an edit of the whole object
// as `kubectl get -o json` prints it (data and metadata: an annotation
// changes in the same replace as the data it speaks of). edit reports
// whether it changed anything; nothing is replaced when it did not.
func (f *Flavor) editConfigMapObject(ctx context.Context, master, ns, name string, edit func(cm map[string]any) (bool, error)) error {
	for attempt := 1; ; attempt++ {
		body, err := f.editedConfigMap(ctx, master, ns, name, edit)
		if err != nil || body == nil {
			return err
		}
		tmp := fmt.Sprintf("/var/lib/hamaster/%s-%s.json", ns, name)
		if err := f.write(ctx, master, tmp, body, 0o600); err != nil {
			return err
		}
		_, stderr, err := f.m.RunOnMachine(ctx, master, adminKubectl+"replace -f "+tmp+"; rc=$?; rm -f "+tmp+"; exit $rc")
		if err == nil {
			f.log.Info("configmap updated", "configmap", ns+"/"+name)
			return nil
		}
		if IsConflict(stderr) && attempt < configMapAttempts {
			f.log.Info("configmap changed meanwhile: read again", "configmap", ns+"/"+name, "attempt", attempt)
			continue
		}
		return fmt.Errorf("replace %s/%s on %s: %w (stderr: %s)", ns, name, master, err, tail(stderr))
	}
}

// configMapAttempts bounds editConfigMap's reads after a Conflict.
const configMapAttempts = 3

// IsConflict reports whether kubectl's stderr is the apiserver's 409
// Conflict of an update whose resourceVersion is not the object's.
func IsConflict(stderr []byte) bool {
	s := string(stderr)
	return strings.Contains(s, "the object has been modified") || strings.Contains(s, "(Conflict)")
}

// editedConfigMap reads the ConfigMap and applies edit to it: the
// object to replace (with the resourceVersion read), nil when the edit
// changes nothing.
func (f *Flavor) editedConfigMap(ctx context.Context, master, ns, name string, edit func(map[string]any) (bool, error)) ([]byte, error) {
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, adminKubectl+"-n "+ns+" get configmap "+name+" -o json")
	if err != nil {
		return nil, fmt.Errorf("read %s/%s on %s: %w (stderr: %s)", ns, name, master, err, tail(stderr))
	}
	var cm map[string]any
	if err := json.Unmarshal(out, &cm); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", ns, name, err)
	}
	if md, _ := cm["metadata"].(map[string]any); md == nil || md["resourceVersion"] == nil {
		return nil, fmt.Errorf("%s/%s has no resourceVersion", ns, name)
	}
	changed, err := edit(cm)
	if err != nil || !changed {
		return nil, err
	}
	return json.Marshal(cm)
}

// write puts data at path on machine atomically (a temporary file
// renamed over it), with mode, over the provider's RunOnMachine: the
// only way in every provider gives.
func (f *Flavor) write(ctx context.Context, machine, path string, data []byte, mode os.FileMode) error {
	if _, stderr, err := f.m.RunOnMachine(ctx, machine, remote.WriteFileScript(path, data, mode)); err != nil {
		return fmt.Errorf("%w (stderr: %s)", err, tail(stderr))
	}
	return nil
}
