// Package providers defines what a cloud (or the embedded local provider)
// must offer hamaster: replicas (VMs) cloned from a template, the cluster's
// static IP, an L4 load balancer and a way in. Workflows import
// this package, never a cloud package.
//
// Contract shared by every method:
//   - ctx is first and bounds the call, including any wait for a cloud's
//     long-running operation: a method returns only when its effect is done
//     (an instance is running, an address is detached, a target registered).
//   - "Not found" is reported as an error of kind errkind.NotFound, except
//     for deletes, which treat an absent thing as success.
//   - Every mutating method is idempotent: calling it again with the same
//     arguments after a success, or after a crash half-way, converges to the
//     same state and returns success.
//   - Transient cloud failures (rate limits, 5xx) are retried inside the
//     provider with a bound; what escapes is errkind.Unavailable.
package providers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/hamaster/hamaster/dns"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
)

// Template is everything needed to boot a replica: what a cloud keeps as the
// instance's configuration and metadata. New replicas are cloned from an
// existing one's template; only name, address, data disk and the etcd
// environment differ.
type Template struct {
	// Version is the control-plane version the replica runs, as its
	// flavor's format reads it (package flavors). "" when the template
	// names none (a kube-up master on its devel upload); a workflow given
	// "" keeps each replica's version and does not compare /version.
	Version string `json:"version"`
	// ExtraArgs are flags for the control-plane process.
	ExtraArgs []string `json:"extra_args,omitempty"`
	// Env is the replica's environment, which the flavor's format writes
	// on the machine (providers.Format); the etcd cluster a new replica
	// joins is set here.
	Env map[string]string `json:"env,omitempty"`
	// Files are the replica's certificates and keys, by file name
	// ("kube-master-certs" metadata). Keys of Files are base names.
	Files map[string][]byte `json:"files,omitempty"`
	// Machine holds provider-specific machine settings copied verbatim when
	// cloning (machine type, image, network tags, service account...).
	Machine map[string]string `json:"machine,omitempty"`
}

// Clone returns a deep copy.
func (t Template) Clone() Template {
	c := Template{Version: t.Version, ExtraArgs: append([]string(nil), t.ExtraArgs...)}
	c.Env = make(map[string]string, len(t.Env))
	for k, v := range t.Env {
		c.Env[k] = v
	}
	c.Files = make(map[string][]byte, len(t.Files))
	for k, v := range t.Files {
		c.Files[k] = append([]byte(nil), v...)
	}
	c.Machine = make(map[string]string, len(t.Machine))
	for k, v := range t.Machine {
		c.Machine[k] = v
	}
	return c
}

// Replica is one control-plane VM as the provider sees it.
type Replica struct {
	Name string `json:"name"`
	// Zone is the failure domain ("" for local).
	Zone string `json:"zone,omitempty"`
	// Address is the internal address etcd peers and the LB use.
	Address string `json:"address"`
	// External is the address the operator reaches the replica at when
	// the internal one is not routable from outside the cloud (a GCE
	// master's external NAT IP); "" when Address is reachable.
	External string `json:"external_address,omitempty"`
	// State is "running", "stopped" or "provisioning".
	State string `json:"state"`
	// Template is the replica's current configuration.
	Template Template `json:"template"`
}

// Running reports whether the replica's VM is up.
func (r Replica) Running() bool { return r.State == StateRunning }

// Replica states.
const (
	StateRunning      = "running"
	StateStopped      = "stopped"
	StateProvisioning = "provisioning"
)

// Instances manages replica VMs.
type Instances interface {
	// List returns the cluster's replicas, found by the cluster's label (not
	// by a name prefix), sorted by name.
	List(ctx context.Context) ([]Replica, error)
	// Get returns one replica or errkind.NotFound.
	Get(ctx context.Context, name string) (Replica, error)
	// ReserveAddress reserves the internal address the named replica will
	// use, before its VM exists (its etcd peer URL and certificates need it).
	// Idempotent: the same name gets the same address.
	ReserveAddress(ctx context.Context, name, zone string) (string, error)
	// ReleaseAddress frees a reservation; absent is success.
	ReleaseAddress(ctx context.Context, name string) error
	// Create boots a replica from tmpl with a fresh data disk on its reserved
	// address and waits until it runs. If it already exists it is returned
	// as is (Create does not compare templates: use Recreate for that).
	Create(ctx context.Context, name, zone string, tmpl Template) (Replica, error)
	// Recreate replaces the replica's VM with one booted from tmpl, keeping
	// its name, address and data disk, and waits until it runs.
	Recreate(ctx context.Context, name string, tmpl Template) (Replica, error)
	// Delete deletes the VM, its data disk and its address reservation,
	// waiting until gone. Absent is success.
	Delete(ctx context.Context, name string) error
}

// Provider is one cloud, bound to one cluster: infrastructure only. What
// a master is (its etcd clusters and how they are reached, its template's
// clone, its certificates) is its flavor's (package flavors), which uses
// the provider's way in (EtcdReacher, MachineDialer).
type Provider interface {
	// Name is the registry name ("local", "gce", "aws").
	Name() string
	Instances() Instances
	// StaticIP is the cluster's public address: attached to master 0 while
	// the cluster has one replica, owned by the LB otherwise.
	StaticIP() lb.StaticIP
	// LoadBalancer is the L4 load balancer in front of the apiservers.
	LoadBalancer() lb.LoadBalancer
	// DNS returns the records driver for kind ("static" is always
	// available; clouds add their managed DNS).
	DNS(kind string) (dns.Records, error)
	// APIServerURL is the https base URL of a replica's apiserver.
	APIServerURL(r Replica) string
	// Close releases connections.
	Close() error
}

// APIServerPorter is implemented by providers that build load balancers,
// health checks and firewall rules for the masters' apiserver port (gce,
// aws). The port is the cluster flavor's (flavors.Flavor.APIServerPort:
// kube-up's masters serve 443, hamaster's APIServerPort), set when the
// flavor is bound to the provider, before any of those is made; a port
// the operator set in the provider's own options (--gce-apiserver-port)
// wins. Until a flavor is bound it is APIServerPort.
type APIServerPorter interface {
	APIServerPort() int
	SetAPIServerPort(port int)
}

// APIServerDialer is implemented by providers that reach the masters'
// apiservers through a tunnel (an SSH bastion, or a master's sshd) rather
// than by routing to their addresses: the workflows' /readyz and /version
// probes dial through it.
type APIServerDialer interface {
	DialAPIServer(ctx context.Context, network, addr string) (net.Conn, error)
}

// Settings are the provider-neutral settings every factory gets.
type Settings struct {
	Cluster  string
	StateDir string
	// Out receives instructions for the operator (the static DNS
	// driver's records); nil discards them.
	Out io.Writer
	// Options are provider-specific settings (project, region, ...).
	Options map[string]string
	// Logger receives the provider's logs (cloud SDK requests at debug);
	// nil discards them.
	Logger *slog.Logger
	// Recognize names the flavor whose format a machine's documents
	// (providers.Format) are in, "" for none it knows
	// (flavors/registry.Recognize). A provider that must tell its
	// masters' format before a flavor is bound (aws: kube-up's masters
	// serve 443) asks it; nil, it cannot tell and says which option to
	// set.
	Recognize func(docs map[string]string) string
	// Flavor is the flavor the operator named (--flavor) or the cluster
	// recorded, "" for neither. A provider whose masters may be in more
	// than one format (aws: kube-up's or hamaster's; gce: kube-up's or
	// kubeadm's) takes it as theirs instead of telling it from what the
	// machines carry.
	Flavor string
}

// Log returns s.Logger, or a logger that discards when it is nil.
func (s Settings) Log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Factory builds a provider for one cluster.
type Factory func(ctx context.Context, s Settings) (Provider, error)

// Registry maps provider names to factories. There is no global registry:
// the CLI builds one and registers every provider in one place; tests build
// their own.
type Registry struct {
	mu        sync.Mutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// Register adds a factory. It panics on a duplicate name: that is a wiring
// bug, not a runtime condition.
func (r *Registry) Register(name string, f Factory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.factories[name]; dup {
		panic(fmt.Sprintf("providers: %q registered twice", name))
	}
	r.factories[name] = f
}

// Names lists the registered providers, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open builds the named provider; an unknown name is errkind.InvalidArgument
// listing the valid ones.
func (r *Registry) Open(ctx context.Context, name string, s Settings) (Provider, error) {
	r.mu.Lock()
	f, ok := r.factories[name]
	r.mu.Unlock()
	if !ok {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--provider: unknown provider %q (valid: %s)", name, strings.Join(r.Names(), ", "))
	}
	return f(ctx, s)
}

// EndpointPorter is implemented by providers whose load balancer or
// VIP serves the apiserver on a port of its own (metal: HAProxy beside
// each apiserver listens on the VIP's 8443, since the apiserver holds
// 6443 on every address; kubeadm's docs/ha-considerations.md).
type EndpointPorter interface {
	EndpointPort() int
}

// NameChooser is implemented by providers whose machines exist before
// hamaster takes them (metal: the inventory's hosts): add-replica without
// a name takes the one NextReplicaName names, or refuses with its reason
// (no free host, in zone when given).
type NameChooser interface {
	NextReplicaName(ctx context.Context, zone string) (string, error)
}

// MasterNamer is implemented by providers whose new masters are named
// after master 0's name (GCE: kube-up's <cluster>-master): add-replica
// without a name derives the next one from it.
type MasterNamer interface {
	MasterName() string
}

// ControlPlaneReporter is implemented by providers whose replicas may run
// one of several control planes (local: hamaster-node's apiserver
// stand-in, "standin", or the real kube-apiserver, "real"): status says
// which.
type ControlPlaneReporter interface {
	ControlPlane() string
}

// WorkerLister is implemented by providers that know machines running a
// kubelet of the cluster but never a master (metal: the inventory's
// role: worker hosts), reachable like the masters (MachineDialer): a
// flavor whose workers keep the apiserver address they joined with finds
// and moves it.
type WorkerLister interface {
	Workers(ctx context.Context) ([]Worker, error)
}

// Worker is one of a WorkerLister's machines.
type Worker struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}
