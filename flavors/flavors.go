// Package flavors defines what a control-plane master is, apart from where
// it runs: a Flavor owns a master's format (its etcd clusters and member
// names, how hamaster reaches those clusters through the provider's way
// in, how a new master's template is cloned from a running one's, who
// issues its certificates, the name its apiserver's certificate is
// verified for, how a target version is checked before a change), while a
// provider (package providers) owns the infrastructure the master runs on:
// machines, addresses, the static IP, the L4 load balancer, DNS and a way
// in. Workflows talk to both; no flavor imports a provider package and no
// provider imports a flavor.
//
// The line is Cluster API's: an infrastructure provider makes machines and
// load balancers; a control-plane provider (KubeadmControlPlane,
// sigs.k8s.io/cluster-api controlplane/kubeadm) knows what a master is and
// how one joins.
//
// One folder a flavor: flavors/hamaster (hamaster's own masters: the local
// provider's, and AWS masters in hamaster's format), flavors/kubeup
// (kube-up's GCE and AWS masters), flavors/kubeadm (kubeadm's masters,
// driven by the real kubeadm over SSH). flavors/registry chooses one for a
// cluster; flavors/flavortest is the conformance suite every flavor passes.
package flavors

import (
	"context"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
)

// Names of the flavors (--flavor).
const (
	Hamaster = "hamaster"
	Kubeadm  = "kubeadm"
	KubeUp   = "kubeup"
)

// Names of the etcd clusters a master may run (providers' names: the
// journal and the state directory keep them).
const (
	EtcdMain   = providers.EtcdMain
	EtcdEvents = providers.EtcdEvents
)

// Flavor is one master format, bound to one cluster's provider.
//
// Contract shared by every method:
//   - ctx is first and bounds the call;
//   - methods that do not take ctx do no I/O and never fail: they answer
//     from the format's conventions alone;
//   - nothing here changes the cluster: the workflows make every change
//     (members added, VMs created) through etcdmember and the provider, so
//     each step stays journaled and idempotent.
type Flavor interface {
	// Name is the flavor's registry name (Hamaster, KubeUp).
	Name() string

	// EtcdClusters lists the etcd clusters every master runs, EtcdMain
	// first; a member is added to and removed from all of them together.
	EtcdClusters() []string
	// EtcdMember is the member name and peer URL replica (at address,
	// "" when not known yet) has in cluster.
	EtcdMember(cluster, replica, address string) (name, peerURL string)
	// EtcdCluster connects to cluster through running masters other than
	// those named in exclude (never through a victim), by the provider's
	// way in. The caller closes the client.
	EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error)

	// CloneTemplate builds the template of a new master named replica, at
	// address, from src (a running master's): members are each cluster's
	// current members (the new one's learner may be among them, without a
	// name yet) and files the certificates the flavor's ReplicaCertIssuer
	// issued for it, nil for a flavor without one (its masters carry
	// their own).
	CloneTemplate(ctx context.Context, src providers.Template, replica, address string, members map[string][]etcdmember.Member, files map[string][]byte) (providers.Template, error)

	// MasterCA is the PEM of the CA the masters' apiserver serving
	// certificates chain to, as the masters carry it; called only for a
	// flavor without ReplicaCertIssuer (whose masters carry the
	// certificates made by the tool that built them: hamaster issues
	// none for them, rotates none, and trusts MasterCA when it probes
	// them).
	MasterCA(ctx context.Context) ([]byte, error)
	// APIServerPort is the port the masters' apiservers serve on: the
	// provider's load balancer, health checks and firewall rules use it
	// (given to it when the two are bound: registry.Open), and so do the
	// workflows' probes and
	// kubeconfigs, unless the operator set the provider's own port.
	APIServerPort() int
	// APIServerName is the name probes verify an apiserver's certificate
	// for, "" for the address dialed (hamaster's own certificates name
	// every replica's address).
	APIServerName() string
	// Format writes and reads the masters' templates on a provider that
	// carries them as documents (providers.Formatted): the provider is
	// given it when the two are bound (registry.Open), before any machine
	// is read. Nil on a provider that carries none.
	Format() providers.Format

	// CheckVersion is called before a workflow changes anything toward
	// version: an errkind.InvalidArgument error names --version and what
	// is missing (a release not published where the masters download
	// theirs). Read-only; may be called again.
	CheckVersion(ctx context.Context, version string) error
}

// Joiner is implemented by flavors whose new masters join the cluster
// with their own tool (kubeadm join --control-plane adds the new etcd
// member as a learner and promotes it), rather than booting from a
// cloned template with a member hamaster added: CloneTemplate then
// carries only the machine, and add-replica runs Join where it would add
// and promote a learner (flavors/kubeadm; the workflows' side:
// workflows/joiner.go).
type Joiner interface {
	// Join makes replica (a claimed, running machine) a master, bounded
	// by timeout (0: the flavor's default); a join that fails leaves no
	// member of replica in etcd and no Node, so it can run again.
	Join(ctx context.Context, replica providers.Replica, timeout time.Duration) error
	// Leave undoes the tool on replica once its etcd member is gone
	// (kubeadm reset) and deletes its Node.
	Leave(ctx context.Context, replica providers.Replica) error
	// Joined reports whether a join whose caller died (a resumed add)
	// completed: a join still running on replica is waited for first
	// (bounded by timeout, 0: the flavor's default), then its last phase
	// checked. false means: undo it and join again.
	Joined(ctx context.Context, replica providers.Replica, timeout time.Duration) (bool, error)
}

// NodeDrainer is implemented by flavors whose masters are Nodes that
// may run workloads (kubeadm's): remove-replica and an in-place upgrade
// drain a master's Node before they touch it, as kubeadm's docs ask, and
// an upgraded master's Node is uncordoned after (--skip-drain opts out).
type NodeDrainer interface {
	// Drain cordons replica's Node and evicts its pods, honouring
	// PodDisruptionBudgets, bounded by timeout (0: the flavor's default).
	// A drain that cannot finish is refused (FailedPrecondition) naming
	// the pods and budgets that hold it, its Node uncordoned again.
	Drain(ctx context.Context, replica providers.Replica, timeout time.Duration) error
	// Uncordon marks replica's Node schedulable again; a Node that is
	// gone is not an error.
	Uncordon(ctx context.Context, replica providers.Replica) error
}

// ReplicaCertIssuer is implemented by flavors whose masters' certificates
// hamaster issues from the cluster CA in its state directory (hamaster's
// own format): add-replica issues a new master's with it (CloneTemplate
// puts them in its template), rotate-certs reissues them, and the probes
// trust that CA. A flavor without it has masters that carry certificates
// made by the tool that built them (MasterCA).
type ReplicaCertIssuer interface {
	// IssueReplicaCertificates issues the certificates of the master
	// named name at address from ca: the files of its template
	// (providers.Template.Files, by base name), the CA's certificate
	// among them. Its apiserver serving certificate names sans (the
	// cluster-wide names: static IP, DNS names, service range) and the
	// master's own name and address. No I/O.
	IssueReplicaCertificates(ca *certs.CA, name, address string, sans certs.APIServerSANs) (map[string][]byte, error)
}

// ClientIssuer is implemented by flavors whose masters carry the
// cluster CA (no ReplicaCertIssuer) and whose tool issues a person's
// client certificate on a master, so that the CA key never leaves the
// masters (kubeadm: `kubeadm kubeconfig user`): hamaster kubeconfig
// uses it. Read-only: nothing in the cluster changes.
type ClientIssuer interface {
	// IssueClient issues a client certificate for req from the masters'
	// CA on a running master. A failure names the master and what to do
	// (no running master; the CA key not on the masters).
	IssueClient(ctx context.Context, req ClientRequest) (ClientCredentials, error)
}

// ClientRequest is what a client certificate is issued for.
type ClientRequest struct {
	// User is the certificate's CN: the Kubernetes user name.
	User string
	// Groups are its O fields, Kubernetes groups; nil: the group the
	// flavor's tool gives its own administrator's kubeconfig.
	Groups []string
	// Validity is how long it is valid from now; 0: one year.
	Validity time.Duration
}

// ClientCredentials are a client certificate a ClientIssuer issued, and
// where to use it. KeyPEM is a secret: never log it.
type ClientCredentials struct {
	// CACertPEM is the masters' CA, which the apiservers' serving
	// certificates chain to and which signed CertPEM.
	CACertPEM, CertPEM, KeyPEM []byte
	// Groups are the certificate's O fields (the request's, or the
	// flavor's default).
	Groups []string
	// Server is the cluster's endpoint as the masters record it
	// (https://host:port), or the issuing master's own apiserver when
	// they record none (a single master built without one).
	Server string
	// Master is the master that issued it.
	Master string
}

// EndpointMover is implemented by flavors whose masters record the
// cluster's endpoint themselves (kubeadm's controlPlaneEndpoint, kept in
// kubeadm-config, kube-public/cluster-info and the masters'
// kubeconfigs): making a single master HA, or moving the endpoint, is
// then a change on every master, which the workflows make one master at
// a time (hamaster endpoint set; the first add-replica of a cluster
// that records none). Every method is idempotent.
type EndpointMover interface {
	// Endpoint is the endpoint the masters record (host:port), "" when
	// they record none (a master built without controlPlaneEndpoint).
	Endpoint(ctx context.Context) (string, error)
	// AddServingSANs makes replica's apiserver serving certificate name
	// hosts (IP addresses or DNS names) besides every name it names
	// already, reissued on the master from the masters' own CA; the
	// apiserver serves it without a restart. Nothing changes when it
	// names them already.
	AddServingSANs(ctx context.Context, replica providers.Replica, hosts ...string) error
	// PointMaster moves the kubeconfigs on replica that name the
	// cluster's endpoint to endpoint (https://host:port), restarting
	// what reads them (the kubelet) without stopping the master's pods.
	PointMaster(ctx context.Context, replica providers.Replica, endpoint string) error
	// SetEndpoint records endpoint (host:port) cluster-wide, through a
	// running master: kubeadm-config's controlPlaneEndpoint and
	// cluster-info's server, which later joins read.
	SetEndpoint(ctx context.Context, endpoint string) error
	// PointConsumers moves the in-cluster consumers the flavor's tool
	// rendered from the endpoint (kubeadm: kube-proxy's kubeconfig, in
	// its ConfigMap) to endpoint (host:port), and restarts what read
	// them at start (kube-proxy's pods, rolled once: a re-run after a
	// crash rolls only when the last one did not). Nothing changes when
	// they name it already.
	PointConsumers(ctx context.Context, endpoint string) error
}

// Upgrader is implemented by flavors that upgrade a master in place
// with their own tool (kubeadm upgrade apply on the first master,
// kubeadm upgrade node on the others) rather than by replacing its
// machine from a template at the new version.
type Upgrader interface {
	// UpgradeMaster upgrades replica to version in place; first marks
	// the first master of the upgrade (kubeadm upgrade apply: the
	// cluster-wide configuration changes too). health is how long a new
	// component that started may take to serve (the operator's
	// --health-timeout; 0: the flavor's default). Before it changes
	// anything it saves what RollbackMaster restores, and it fails at
	// once (not at the tool's own minutes) when a new component exits.
	UpgradeMaster(ctx context.Context, replica providers.Replica, version string, first bool, health time.Duration) error
	// RollbackMaster restores what UpgradeMaster saved on replica (its
	// manifests, certificates, kubeadm and kubelet configuration, the
	// packages; with first, the cluster-wide configuration) and waits
	// until its apiserver answers again. A no-op when nothing was saved.
	RollbackMaster(ctx context.Context, replica providers.Replica, first bool) error
	// FinishUpgrade drops what UpgradeMaster saved on replica, once the
	// whole upgrade has succeeded.
	FinishUpgrade(ctx context.Context, replica providers.Replica) error
}

// CertRenewer is an Upgrader whose masters carry certificates their
// tool renews (kubeadm certs renew): rotate-certs has the flavor renew
// them one master at a time, drained, and rolls a master that fails
// back with RollbackMaster (the renewal saves what it restores, as an
// upgrade does; FinishUpgrade drops it).
type CertRenewer interface {
	Upgrader
	// ExpiringCerts names replica's certificates the tool renews that
	// expire within `within` (none: nothing to do).
	ExpiringCerts(ctx context.Context, replica providers.Replica, within time.Duration) ([]string, error)
	// RenewCerts saves what RollbackMaster restores, renews every
	// certificate of replica the tool manages, restarts its control
	// plane on them and waits until its apiserver is ready again. A
	// re-run after an interruption finishes what the last one began.
	RenewCerts(ctx context.Context, replica providers.Replica) error
}

// FlagUpgrader is an Upgrader that can change the masters' apiserver
// flags as part of the upgrade (rolling-upgrade --extra-args): kubeadm
// keeps them cluster-wide (kubeadm-config's apiServer.extraArgs), and
// every master's upgrade writes them into its manifest.
type FlagUpgrader interface {
	Upgrader
	// WithAPIServerArgs is the same flavor upgrading with args
	// (--name=value) among the apiserver's flags.
	WithAPIServerArgs(args []string) Upgrader
}

// Viewer is implemented by flavors whose tool keeps its own view of the
// masters (kubeadm: Nodes with the control-plane role, static pod
// hashes, certificate expiry): status shows it beside etcd's and the
// load balancer's.
type Viewer interface {
	View(ctx context.Context) (View, error)
}

// View is a flavor's view of the cluster's masters.
type View struct {
	// Endpoint is the endpoint the masters record, "" for none.
	Endpoint string `json:"endpoint"`
	// Version is the cluster's version as the flavor's tool reads it.
	Version string       `json:"version,omitempty"`
	Masters []MasterView `json:"masters"`
	// Problems are what the operator should act on, each with the
	// command that does it.
	Problems []string `json:"problems,omitempty"`
	// Pinned are the consumers that name one master's own address where
	// the flavor's tool would name the endpoint (PinFinder), each with
	// the command that moves it; PinnedError says why they could not be
	// read.
	Pinned      []Pin  `json:"pinned,omitempty"`
	PinnedError string `json:"pinned_error,omitempty"`
}

// MasterView is one master as its flavor's tool sees it.
type MasterView struct {
	Replica        string `json:"replica"`
	Node           string `json:"node,omitempty"`
	NodeReady      bool   `json:"node_ready"`
	ControlPlane   bool   `json:"control_plane"`
	KubeletVersion string `json:"kubelet_version,omitempty"`
	// StaticPods maps a component to its mirror pod's
	// kubernetes.io/config.hash.
	StaticPods map[string]string `json:"static_pods,omitempty"`
	// Certificates as `kubeadm certs check-expiration` reports them.
	Certificates []CertificateExpiry `json:"certificates,omitempty"`
	// Error is why the master could not be read, "" when it was.
	Error string `json:"error,omitempty"`
}

// CertificateExpiry is one certificate's (or kubeconfig's) expiry.
type CertificateExpiry struct {
	Name     string    `json:"name"`
	Expires  time.Time `json:"expires"`
	CA       string    `json:"ca,omitempty"`
	External bool      `json:"externally_managed,omitempty"`
}

// APIServerStopper is implemented by joining flavors that can stop a
// master's apiserver alone, its etcd member still serving: remove-replica
// stops the drained apiserver before the member's removal, so its last
// clients (connections kept alive through the load balancer) are closed
// by its graceful shutdown instead of answered by an apiserver without a
// store. The machine's other components stay until Leave.
type APIServerStopper interface {
	StopAPIServer(ctx context.Context, replica providers.Replica) error
}

// Recoverer is implemented by flavors that rebuild a master's etcd with
// their format's own files (kubeadm: the stacked etcd's static pod
// manifest and data directory), for hamaster recover after a quorum
// loss. The workflow prefers it to the provider's providers.Recoverer
// (the local provider's processes). Both methods leave replica's etcd a
// one-member cluster it leads and its apiserver running again, keep the
// data they replace aside (returned: the path on the master), and finish
// what an interrupted call began.
type Recoverer interface {
	// ForceNewCluster rewrites replica's etcd data into a one-member
	// cluster as etcd --force-new-cluster does (every key kept, same
	// cluster ID, the other members removed).
	ForceNewCluster(ctx context.Context, replica providers.Replica) (keptAside string, err error)
	// RestoreSnapshot replaces replica's etcd data by a restore of the
	// snapshot file at snapshotPath (on this machine) with etcd's
	// "snapshot restore" semantics: hash verified, one member, a new
	// cluster ID.
	RestoreSnapshot(ctx context.Context, replica providers.Replica, snapshotPath string) (keptAside string, err error)
}

// PinFinder is implemented by flavors whose tool renders consumers of
// the control plane from the cluster's endpoint (kubeadm: kube-proxy's
// kubeconfig in its ConfigMap, the masters' admin.conf, super-admin.conf
// and kubelet.conf, kube-public/cluster-info), which a cluster made HA
// after the fact can have left on one master's own address: that master
// is then a single point of failure. status lists them (View.Pinned) and
// remove-replica refuses to remove a master one of them names, unless
// --force. Read-only.
type PinFinder interface {
	// Pinned lists every consumer that names one master's own address
	// (its IP address or its Node name) where the tool would name the
	// endpoint, none when the masters record no endpoint (a single
	// master: nothing to point them at). It reads through running
	// masters not in exclude, and not the files of those (remove-replica
	// excludes its victim, whose own files go with it); a master it
	// cannot read fails it.
	Pinned(ctx context.Context, exclude ...string) ([]Pin, error)
}

// Pin is one consumer left on one master's own address.
type Pin struct {
	// Consumer names it: "kube-system/kube-proxy ConfigMap
	// kubeconfig.conf", "/etc/kubernetes/admin.conf".
	Consumer string `json:"consumer"`
	// On is the master whose file it is, "" for an object of the
	// cluster.
	On string `json:"on,omitempty"`
	// Server is the address it names (https://host:port, or host:port).
	Server string `json:"server"`
	// Master is the master whose own address that is; "" for a former
	// endpoint of the cluster (one it had before the current one), which
	// no master's removal waits for.
	Master string `json:"master"`
	// Fix is the command that moves it to the endpoint.
	Fix string `json:"fix"`
}

// PinsOf are the pins among pins that name master, except those on
// master itself (its own files go with it).
func PinsOf(pins []Pin, master string) []Pin {
	var out []Pin
	for _, p := range pins {
		if p.Master == master && p.On != master {
			out = append(out, p)
		}
	}
	return out
}

// String is the pin for people: what, where, the address it names.
func (p Pin) String() string {
	where := p.Consumer
	if p.On != "" {
		where += " on " + p.On
	}
	if p.Master == "" {
		return where + " names a former endpoint of the cluster (" + p.Server + ")"
	}
	return where + " names " + p.Master + "'s own address (" + p.Server + ")"
}
