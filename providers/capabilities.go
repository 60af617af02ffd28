package providers

import (
	"context"

	"github.com/hamaster/hamaster/lb"
)

// Capabilities are a provider's optional interfaces, resolved once by
// CapabilitiesOf when the provider is bound (to its flavor, to the
// workflows' Deps): a field is the provider (or its Instances) as that
// interface, nil when it has not got it. Callers check a field; none
// asserts a type. docs/contract.md tables which provider has which.
type Capabilities struct {
	// Reaching machines: the provider's way in to its machines and to
	// the etcd of masters in hamaster's own format.

	// MachineDialer connects to a machine's own loopback (kube-up's,
	// kubeadm's etcd).
	MachineDialer MachineDialer
	// MachineRunner runs commands on a machine (a flavor's own tool).
	MachineRunner MachineRunner
	// MachineUploader writes files on a machine itself.
	MachineUploader MachineUploader
	// EtcdReacher reaches the etcd of masters in hamaster's format.
	EtcdReacher EtcdReacher

	// Format: what the machines carry, and where a master's release
	// comes from.

	// MasterFormatter tells which tool built the masters.
	MasterFormatter MasterFormatter
	// Formatted carries templates as documents a flavor's Format writes.
	Formatted Formatted
	// ReleaseSource is where masters download their release at boot.
	ReleaseSource ReleaseSource

	// Ports and the way to the apiservers.

	// APIServerPorter builds load balancers, health checks and firewall
	// rules for the flavor's apiserver port.
	APIServerPorter APIServerPorter
	// EndpointPorter serves the apiserver on a port of the static IP's
	// own.
	EndpointPorter EndpointPorter
	// APIServerDialer reaches the apiservers through a tunnel.
	APIServerDialer APIServerDialer

	// Naming and inventory: what machines a new master or a worker is.

	// NameChooser names the free machine add-replica takes.
	NameChooser NameChooser
	// MasterNamer names new masters after master 0.
	MasterNamer MasterNamer
	// WorkerLister lists the machines that run a kubelet, never a master.
	WorkerLister WorkerLister
	// ControlPlaneReporter says which control plane the replicas run.
	ControlPlaneReporter ControlPlaneReporter

	// Adoption: taking over a cluster another tool made.

	// Adopter tags another tool's master 0 as hamaster's; the mutating
	// workflows run it as their adopt step.
	Adopter Adopter

	// The load balancer's: capabilities of what p.LoadBalancer()
	// returns, resolved by CapabilitiesOf (nil in OwnCapabilitiesOf's).

	// LBCreateChecker tells, before anything changes, whether the first
	// add's load balancer would give a reachable endpoint.
	LBCreateChecker lb.CreateChecker
	// LBPromotionNoter says what promoting the static IP to the load
	// balancer costs its clients.
	LBPromotionNoter lb.PromotionNoter

	// Recovery: capabilities of the provider's Instances, resolved by
	// CapabilitiesOf (nil in OwnCapabilitiesOf's).

	// ReplicaDiagnoser looks inside a replica (its process, its log).
	ReplicaDiagnoser ReplicaDiagnoser
	// Recoverer rebuilds etcd from one replica's disk.
	Recoverer Recoverer
	// Forgetter drops a machine that does not answer from the record.
	Forgetter Forgetter
}

// CapabilitiesOf resolves p's optional interfaces, and those of what
// p.Instances() and p.LoadBalancer() return: with OwnCapabilitiesOf, the
// one place a provider's type is asserted. The workflows' binding resolves it
// (workflows.Deps.ProviderCaps).
func CapabilitiesOf(p Provider) Capabilities {
	c := OwnCapabilitiesOf(p)
	if p == nil {
		return c
	}
	inst := p.Instances()
	c.ReplicaDiagnoser, _ = inst.(ReplicaDiagnoser)
	c.Recoverer, _ = inst.(Recoverer)
	c.Forgetter, _ = inst.(Forgetter)
	l := p.LoadBalancer()
	c.LBCreateChecker, _ = l.(lb.CreateChecker)
	c.LBPromotionNoter, _ = l.(lb.PromotionNoter)
	return c
}

// OwnCapabilitiesOf resolves p's own optional interfaces, not its
// Instances' (those fields stay nil), and does not call p.Instances():
// what a flavor resolves when it binds itself to p (its constructor, the
// registry's Detect), before p may have any machine to manage.
func OwnCapabilitiesOf(p Provider) Capabilities {
	var c Capabilities
	if p == nil {
		return c
	}
	c.MachineDialer, _ = p.(MachineDialer)
	c.MachineRunner, _ = p.(MachineRunner)
	c.MachineUploader, _ = p.(MachineUploader)
	c.EtcdReacher, _ = p.(EtcdReacher)
	c.MasterFormatter, _ = p.(MasterFormatter)
	c.Formatted, _ = p.(Formatted)
	c.ReleaseSource, _ = p.(ReleaseSource)
	c.APIServerPorter, _ = p.(APIServerPorter)
	c.EndpointPorter, _ = p.(EndpointPorter)
	c.APIServerDialer, _ = p.(APIServerDialer)
	c.NameChooser, _ = p.(NameChooser)
	c.MasterNamer, _ = p.(MasterNamer)
	c.WorkerLister, _ = p.(WorkerLister)
	c.ControlPlaneReporter, _ = p.(ControlPlaneReporter)
	c.Adopter, _ = p.(Adopter)
	return c
}

// APIServerPortOf is the port p's apiservers, its static IP and its LB
// serve on: APIServerPorter's, else APIServerPort.
func APIServerPortOf(p Provider) int {
	if pp, ok := p.(APIServerPorter); ok {
		return pp.APIServerPort()
	}
	return APIServerPort
}

// EndpointPortOf is the port p's static IP or load balancer serves the
// apiserver on: EndpointPorter's, else the apiservers' own.
func EndpointPortOf(p Provider) int {
	if ep, ok := p.(EndpointPorter); ok {
		return ep.EndpointPort()
	}
	return APIServerPortOf(p)
}

// Diagnose asks inst when it implements ReplicaDiagnoser; otherwise it
// knows nothing (zero Diagnosis).
func Diagnose(ctx context.Context, inst Instances, name string) (Diagnosis, error) {
	if d, ok := inst.(ReplicaDiagnoser); ok {
		return d.Diagnose(ctx, name)
	}
	return Diagnosis{}, nil
}

// Adopter is implemented by providers that take over master 0 of a
// cluster another tool made, which carries none of hamaster's tags (aws:
// kube-up's master, its data volume and Elastic IP, found by kube-up's
// tags). Until it is adopted the provider lists none of its machines.
// Adopt is explicit: only the mutating workflows call it (their adopt
// step, before the cluster lock is taken: the lock is reached through
// the masters); building the provider and reading a cluster never tag
// anything. It is idempotent: nothing to adopt, or a cluster already
// adopted, is not an error.
type Adopter interface {
	Adopt(ctx context.Context) error
}
