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
// driven by the real kubeadm over SSH: being built, issue 23). flavors/registry chooses one for a
// cluster; flavors/flavortest is the conformance suite every flavor passes.
package flavors

import (
	"context"
	"time"

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
	// name yet) and files the certificates hamaster issued for it, which
	// a flavor whose masters carry their own ignores.
	CloneTemplate(ctx context.Context, src providers.Template, replica, address string, members map[string][]etcdmember.Member, files map[string][]byte) (providers.Template, error)

	// CarriesCertificates reports whether the masters carry certificates
	// made by the tool that built them: hamaster then issues none for
	// them (CloneTemplate gives a new master its own), rotates none, and
	// trusts MasterCA when it probes them. Otherwise hamaster issues them
	// from the cluster CA in its state directory.
	CarriesCertificates() bool
	// MasterCA is the PEM of the CA the masters' apiserver serving
	// certificates chain to, as the masters carry it; called only when
	// CarriesCertificates.
	MasterCA(ctx context.Context) ([]byte, error)
	// APIServerPort is the port the masters' apiservers serve on: the
	// provider's load balancer, health checks and firewall rules use it
	// (BindAPIServerPort), and so do the workflows' probes and
	// kubeconfigs, unless the operator set the provider's own port.
	APIServerPort() int
	// APIServerName is the name probes verify an apiserver's certificate
	// for, "" for the address dialed (hamaster's own certificates name
	// every replica's address).
	APIServerName() string

	// CheckVersion is called before a workflow changes anything toward
	// version: an errkind.InvalidArgument error names --version and what
	// is missing (a release not published where the masters download
	// theirs). Read-only; may be called again.
	CheckVersion(ctx context.Context, version string) error
}

// BindAPIServerPort gives p the port f's masters serve the apiserver on,
// when p builds anything for it (providers.APIServerPorter): what each
// flavor's constructor does when it is bound to a provider.
func BindAPIServerPort(p providers.Provider, f Flavor) {
	if pp, ok := p.(providers.APIServerPorter); ok {
		pp.SetAPIServerPort(f.APIServerPort())
	}
}

// Joiner is implemented by flavors whose new masters join the cluster
// with their own tool (kubeadm join --control-plane adds the new etcd
// member as a learner and promotes it), rather than booting from a
// cloned template with a member hamaster added: CloneTemplate then
// carries only the machine, and add-replica runs Join where it would add
// and promote a learner (flavors/kubeadm; the workflows' side is being
// built, issue 23).
type Joiner interface {
	// Join makes replica (a claimed, running machine) a master, bounded
	// by timeout (0: the flavor's default); a join that fails leaves no
	// member of replica in etcd and no Node, so it can run again.
	Join(ctx context.Context, replica providers.Replica, timeout time.Duration) error
	// Leave undoes the tool on replica once its etcd member is gone
	// (kubeadm reset) and deletes its Node.
	Leave(ctx context.Context, replica providers.Replica) error
}
