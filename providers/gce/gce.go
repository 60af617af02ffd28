// Package gce is hamaster's Compute Engine provider: replicas are VMs
// cloned from the existing master (machine type, image, network, tags,
// service account, labels and metadata, the template as the cluster's
// flavor clones and writes it), the static IP is the cluster's regional external address on
// master 0's access config, the load balancer is a backend-service-based
// external passthrough Network Load Balancer (regional HTTPS health check
// on /readyz, one unmanaged instance group per zone, a regional backend
// service, a forwarding rule on the static address), and DNS is Cloud DNS.
//
// Credentials come from Application Default Credentials only. Every
// mutating call carries a requestId (so a retry after an unclear failure
// is deduplicated by the API) and waits on its operation with the
// operations "wait" method, bounded by OptOpTimeout. Errors map to errkind:
// 404 → NotFound, 409 → AlreadyExists, 429 / rateLimitExceeded / 5xx →
// retried with backoff, then Unavailable.
//
// Resources, named as kube-up names them where kube-up has them
// (cluster/gce/util.sh; MASTER_NAME is OptMasterName, default
// <cluster>-master):
//
//	instance      MASTER_NAME, MASTER_NAME-xyz   found by name (util.sh
//	              get-replica-name-regexp), never by a label
//	data disk     <replica>-pd        device name master-pd (create-master)
//	internal IP   <replica>-internal  regional INTERNAL address
//	static IP     MASTER_NAME-ip      regional EXTERNAL address (create-master)
//	health check  MASTER_NAME-hc      regional HTTPS /readyz on 443
//	              (create-internal-loadbalancer's name)
//	groups        MASTER_NAME-<zone>  unmanaged, one per zone
//	backend svc   MASTER_NAME         regional, EXTERNAL, TCP
//	fwd rule      MASTER_NAME         on the static IP, port 443 (create-loadbalancer)
//	firewall      MASTER_NAME-lb-health-checks  lets the health-check
//	              probe ranges reach the masters' network tags on 443
//
// Template mapping: Version, ExtraArgs, Env and Files ↔ the metadata
// items the cluster's flavor writes and reads (providers.Format, set by
// the flavor: kube-up's kube-env and kube-master-certs, flavors/kubeup
// Metadata), a new version taken from OptReleaseURL
// (providers.ReleaseSource); Machine ↔ the instance settings copied when
// cloning (keys Machine*), the other metadata items as "metadata.<key>"
// and labels as "label.<key>".
package gce

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	dnsv1 "google.golang.org/api/dns/v1"
	"google.golang.org/api/option"

	"github.com/hamaster/hamaster/dns"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Name is the registry name of this provider.
const Name = "gce"

// Option keys understood in providers.Settings.Options.
const (
	OptProject    = "gce-project"
	OptRegion     = "gce-region"
	OptZones      = "gce-zone" // one zone or a comma-separated list; the first is the default
	OptNetwork    = "gce-network"
	OptSubnetwork = "gce-subnetwork"
	// OptMasterName is kube-up's MASTER_NAME, the first master's name
	// (default <cluster>-master: kube-up's INSTANCE_PREFIX-master, so
	// --cluster kubernetes finds kube-up's default "kubernetes-master").
	// Replicas are MASTER_NAME-<3 characters>.
	OptMasterName = "gce-master-name"
	// OptStaticAddress names the regional external address (default
	// MASTER_NAME-ip, as cluster/gce/util.sh create-master reserves it).
	OptStaticAddress = "gce-static-address"
	// OptDNSZone is the Cloud DNS managed zone for --dns clouddns.
	OptDNSZone = "dns-zone"
	// OptEndpoint overrides the API endpoint (tests: the fake's URL) and
	// turns authentication off. Never set it in production.
	OptEndpoint = "gce-endpoint"
	// OptOpTimeout bounds each wait for an operation (default 10m).
	OptOpTimeout = "gce-op-timeout"
	// OptAPIServerPort is the port the masters' apiservers serve on, and so
	// the health check's, the forwarding rule's and the firewall rule's
	// (default: the cluster flavor's, flavors.Flavor.APIServerPort; 443 on
	// kube-up's masters). Set it only for masters that serve another.
	OptAPIServerPort = "gce-apiserver-port"
	// OptDrainSeconds is the backend service's connection-draining timeout
	// (default 30).
	OptDrainSeconds = "gce-drain-seconds"
	// SSH to the masters for etcd (kube-up masters serve etcd on
	// 127.0.0.1 only) takes remote's options: remote.OptUser is
	// required, with remote.OptKey or an agent, and remote.OptKnownHosts
	// unless host keys are deliberately not checked.
	// OptReleaseURL is where kube-up masters' release tarballs come from
	// (default https://dl.k8s.io/release, tars_from_version's): a new
	// version V is <url>/V/kubernetes-server-linux-amd64.tar.gz with the
	// hash published at <that>.sha512 (and the manifests tarball beside
	// it). Operators with a mirror point it there.
	OptReleaseURL = "gce-release-url"
)

// MasterFormatKubeUp is the kube-up flavor's name (flavors.KubeUp, which
// no provider imports): the format of a GCE cluster's masters unless
// Settings.Flavor names another (kubeadm's: VMs from an image with
// kubeadm installed, master 0 made by kubeadm init).
const MasterFormatKubeUp = "kubeup"

// Labels put on every labelable resource.
const (
	LabelCluster = "hamaster-cluster"
	LabelRole    = "hamaster-role"
	// LabelLB marks an instance the LB is draining ("draining").
	LabelLB = "hamaster-lb"
)

// dataDeviceName is the data disk's device name (create-master).
const dataDeviceName = "master-pd"

// Provider is the GCE provider bound to one cluster.
type Provider struct {
	cluster  string
	stateDir string
	opts     map[string]string
	flavor   string // Settings.Flavor: the masters' format (MasterFormat)
	project  string
	region   string
	zones    []string
	network  string
	subnet   string
	opWait   time.Duration
	apiPort  int  // the masters' apiserver port: the flavor's, or OptAPIServerPort
	portOpt  bool // apiPort is OptAPIServerPort's: the flavor's does not replace it
	log      *slog.Logger

	instances *compute.InstancesClient
	disks     *compute.DisksClient
	addresses *compute.AddressesClient
	hcs       *compute.RegionHealthChecksClient
	groups    *compute.InstanceGroupsClient
	backends  *compute.RegionBackendServicesClient
	rules     *compute.ForwardingRulesClient
	zoneOps   *compute.ZoneOperationsClient
	regionOps *compute.RegionOperationsClient
	globalOps *compute.GlobalOperationsClient
	firewalls *compute.FirewallsClient
	dnsSvc    *dnsv1.Service

	mu       sync.Mutex
	zoneOf   map[string]string // replica → zone (cache)
	diskInfo map[string]diskInfo
	inst     *instances
	closers  []interface{ Close() error }
	ssh      map[string]*remote.Client
	out      io.Writer

	// FormatSlot holds the format that writes and reads the masters'
	// templates (the flavor's); releaseURL is OptReleaseURL
	// (providers.ReleaseSource).
	providers.FormatSlot
	releaseURL string
}

type diskInfo struct {
	image, typ string
	sizeGb     int64
}

// New is the providers.Factory of the GCE provider.
func New(ctx context.Context, s providers.Settings) (providers.Provider, error) {
	o := s.Options
	if o == nil {
		o = map[string]string{}
	}
	if s.Cluster == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--cluster: required")
	}
	p := &Provider{cluster: s.Cluster, stateDir: s.StateDir, opts: o, flavor: s.Flavor, project: o[OptProject], region: o[OptRegion],
		network: o[OptNetwork], subnet: o[OptSubnetwork], opWait: 10 * time.Minute, apiPort: providers.APIServerPort, log: s.Log(),
		zoneOf: map[string]string{}, diskInfo: map[string]diskInfo{}, ssh: map[string]*remote.Client{},
		releaseURL: o[OptReleaseURL]}
	if p.releaseURL != "" {
		if err := providers.CheckHTTPURL(OptReleaseURL, p.releaseURL); err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "%w", err)
		}
	}
	p.out = s.Out
	if p.out == nil {
		p.out = os.Stdout
	}
	for _, z := range strings.Split(o[OptZones], ",") {
		if z = strings.TrimSpace(z); z != "" {
			p.zones = append(p.zones, z)
		}
	}
	switch {
	case p.project == "":
		return nil, errkind.Errorf(errkind.InvalidArgument, "--gce-project: required")
	case len(p.zones) == 0:
		return nil, errkind.Errorf(errkind.InvalidArgument, "--gce-zone: required")
	}
	if p.region == "" {
		z := p.zones[0]
		p.region = z[:max(strings.LastIndex(z, "-"), 0)]
	}
	for _, z := range p.zones {
		if !strings.HasPrefix(z, p.region+"-") {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--gce-zone %s is not in region %s", z, p.region)
		}
	}
	if n := p.fwName(); len(n) > 63 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s %q: too long, the firewall rule %s would pass Compute's 63-character name limit", OptMasterName, p.masterName(), n)
	}
	if o[remote.OptUser] == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: required with the gce provider: kube-up masters serve etcd on 127.0.0.1 only, so hamaster reaches it over SSH to each master's external address, as kube-up's `gcloud compute ssh` does", remote.OptUser)
	}
	if p.network == "" {
		p.network = "global/networks/default"
	}
	if p.subnet == "" {
		p.subnet = "regions/" + p.region + "/subnetworks/default"
	}
	if v := o[OptOpTimeout]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, errkind.Errorf(errkind.InvalidArgument, "%s %q: want a duration such as 10m", OptOpTimeout, v)
		}
		p.opWait = d
	}
	if v := o[OptAPIServerPort]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s %q: want a TCP port 1-65535 (default: the flavor's; kube-up's masters serve 443)", OptAPIServerPort, v)
		}
		p.apiPort, p.portOpt = n, true
	}
	// The client libraries log each request and response at debug.
	copts := []option.ClientOption{option.WithLogger(p.log)}
	if ep := o[OptEndpoint]; ep != "" {
		copts = append(copts, option.WithEndpoint(strings.TrimSuffix(ep, "/")), option.WithoutAuthentication())
	}
	var err error
	mk := func(f func() (interface{ Close() error }, error)) {
		if err == nil {
			var c interface{ Close() error }
			if c, err = f(); err == nil {
				p.closers = append(p.closers, c)
			}
		}
	}
	mk(func() (c interface{ Close() error }, e error) {
		p.instances, e = compute.NewInstancesRESTClient(ctx, copts...)
		return p.instances, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.disks, e = compute.NewDisksRESTClient(ctx, copts...)
		return p.disks, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.addresses, e = compute.NewAddressesRESTClient(ctx, copts...)
		return p.addresses, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.hcs, e = compute.NewRegionHealthChecksRESTClient(ctx, copts...)
		return p.hcs, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.groups, e = compute.NewInstanceGroupsRESTClient(ctx, copts...)
		return p.groups, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.backends, e = compute.NewRegionBackendServicesRESTClient(ctx, copts...)
		return p.backends, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.rules, e = compute.NewForwardingRulesRESTClient(ctx, copts...)
		return p.rules, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.zoneOps, e = compute.NewZoneOperationsRESTClient(ctx, copts...)
		return p.zoneOps, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.regionOps, e = compute.NewRegionOperationsRESTClient(ctx, copts...)
		return p.regionOps, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.globalOps, e = compute.NewGlobalOperationsRESTClient(ctx, copts...)
		return p.globalOps, e
	})
	mk(func() (c interface{ Close() error }, e error) {
		p.firewalls, e = compute.NewFirewallsRESTClient(ctx, copts...)
		return p.firewalls, e
	})
	if err == nil {
		p.dnsSvc, err = dnsv1.NewService(ctx, copts...)
	}
	if err != nil {
		p.Close()
		return nil, errkind.Errorf(errkind.FailedPrecondition, "gce: create API clients (Application Default Credentials: run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS): %w", err)
	}
	p.inst = &instances{p: p}
	return p, nil
}

// SetLogger sets the provider's logger.
func (p *Provider) SetLogger(l *slog.Logger) { p.log = l }

// Name implements providers.Provider.
func (p *Provider) Name() string { return Name }

// Instances implements providers.Provider.
func (p *Provider) Instances() providers.Instances { return p.inst }

// StaticIP implements providers.Provider.
func (p *Provider) StaticIP() lb.StaticIP { return &staticIP{p: p} }

// LoadBalancer implements providers.Provider.
func (p *Provider) LoadBalancer() lb.LoadBalancer { return &loadBalancer{p: p} }

// DNS implements providers.Provider: "static" or "clouddns" (needs
// OptDNSZone).
func (p *Provider) DNS(kind string) (dns.Records, error) {
	switch kind {
	case "", "static":
		return dns.NewStatic(p.out), nil
	case "clouddns":
		if p.opts[OptDNSZone] == "" {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--dns clouddns needs --dns-zone (the Cloud DNS managed zone)")
		}
		return &cloudDNS{p: p, zone: p.opts[OptDNSZone]}, nil
	}
	return nil, errkind.Errorf(errkind.InvalidArgument, "--dns: %q is not available with the gce provider (valid: static, clouddns)", kind)
}

// APIServerURL implements providers.Provider: the master's external
// address (kube-up's ${MASTER_NAME}-https firewall rule opens 443 to the
// masters from anywhere; util.sh create-master), never the internal one,
// which the operator cannot route to.
func (p *Provider) APIServerURL(r providers.Replica) string {
	addr := r.External
	if addr == "" {
		addr = r.Address
	}
	return fmt.Sprintf("https://%s", net.JoinHostPort(addr, strconv.Itoa(p.apiPort)))
}

// APIServerPort implements providers.APIServerPorter: the port the
// masters' apiservers, the health check, the forwarding rule and the
// firewall rule use.
func (p *Provider) APIServerPort() int { return p.apiPort }

// SetAPIServerPort implements providers.APIServerPorter: the flavor's
// port, unless --gce-apiserver-port set one.
func (p *Provider) SetAPIServerPort(port int) {
	if !p.portOpt {
		p.apiPort = port
	}
}

// Close implements providers.Provider.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.closers {
		_ = c.Close()
	}
	p.closers = nil
	return nil
}

// Cluster-wide resource names.
func (p *Provider) staticAddressName() string {
	if n := p.opts[OptStaticAddress]; n != "" {
		return n
	}
	return p.masterName() + "-ip"
}

// MasterName is kube-up's MASTER_NAME: master 0's name; replicas are
// MASTER_NAME-<3 characters>.
var _ providers.MasterNamer = (*Provider)(nil)

// MasterName implements providers.MasterNamer.
func (p *Provider) MasterName() string { return p.masterName() }

// masterName is kube-up's MASTER_NAME.
func (p *Provider) masterName() string {
	if n := p.opts[OptMasterName]; n != "" {
		return n
	}
	return p.cluster + "-master"
}
func (p *Provider) hcName() string               { return p.masterName() + "-hc" }
func (p *Provider) bsName() string               { return p.masterName() }
func (p *Provider) frName() string               { return p.masterName() }
func (p *Provider) fwName() string               { return p.masterName() + "-lb-health-checks" }
func (p *Provider) groupName(zone string) string { return p.masterName() + "-" + zone }
func addressName(replica string) string          { return replica + "-internal" }
func dataDiskName(replica string) string         { return replica + "-pd" }

// Partial resource URLs.
func (p *Provider) regionLink(coll, name string) string {
	return fmt.Sprintf("projects/%s/regions/%s/%s/%s", p.project, p.region, coll, name)
}
func (p *Provider) zoneLink(zone, coll, name string) string {
	return fmt.Sprintf("projects/%s/zones/%s/%s/%s", p.project, zone, coll, name)
}

func (p *Provider) labels() map[string]string {
	return map[string]string{LabelCluster: labelValue(p.cluster), LabelRole: "master"}
}

// labelValue makes s a valid label value (lowercase, [a-z0-9_-], ≤63).
func labelValue(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return string(b)
}

func (p *Provider) drainSeconds() int32 {
	if v, err := strconv.Atoi(p.opts[OptDrainSeconds]); err == nil && v >= 0 {
		return int32(v)
	}
	return 30
}

var (
	_ providers.Formatted     = (*Provider)(nil)
	_ providers.ReleaseSource = (*Provider)(nil)
)

// Carrier implements providers.Formatted: metadata items.
func (*Provider) Carrier() string { return providers.CarrierMetadata }

// ReleaseURL implements providers.ReleaseSource (OptReleaseURL).
func (p *Provider) ReleaseURL() (string, string) { return p.releaseURL, OptReleaseURL }
