// Package aws is hamaster's AWS provider: replicas are EC2 instances cloned
// from the existing master (AMI, type, subnet, security groups, instance
// profile, key, user data) with a data volume of their own; the static IP
// is the cluster's Elastic IP; the load balancer is an internet-facing
// Network Load Balancer that takes the Elastic IP over through a subnet
// mapping; managed DNS is Route53.
//
// Cluster membership is the tag hamaster.io/cluster=<cluster> on instances,
// data volumes, the Elastic IP, the load balancer and its target group;
// a replica's name is its Name tag.
//
// Clients come from config.LoadDefaultConfig (the standard credential chain
// and region); OptEndpoint (or AWS_ENDPOINT_URL) points them at another
// endpoint, e.g. moto in tests. Throttling (RequestLimitExceeded, Throttling)
// and 5xx are retried by the SDK's standard retryer with a bound
// (OptMaxAttempts); what escapes is mapped to errkind (see errors.go).
//
// User data: what it says is the cluster's flavor's (providers.Format:
// flavors/kubeup UserData for kube-up's script, flavors/hamaster UserData
// for hamaster's MIME layout); the provider stores it. Address view: see
// addrmap.go.
package aws

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/hamaster/hamaster/dns"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// defaultDeregDelay is the deregistration delay in seconds (see
// OptDeregistrationDelay).
const defaultDeregDelay = 120

// Name is the registry name of this provider.
const Name = "aws"

// Option keys understood in providers.Settings.Options. Empty values mean
// the default.
const (
	// OptRegion overrides the region of the default config chain.
	OptRegion = "aws-region"
	// OptEndpoint is a base endpoint for every service (tests: moto).
	// AWS_ENDPOINT_URL is honoured too, by the SDK itself.
	OptEndpoint = "aws-endpoint"
	// OptSubnets maps availability zones to subnets for new replicas:
	// "zone=subnet-id,zone=subnet-id". Without it a replica in the source
	// master's zone uses the master's subnet and another zone's subnet is
	// looked up in the master's VPC.
	OptSubnets = "aws-subnets"
	// OptHostedZoneID is the Route53 hosted zone of --dns route53.
	OptHostedZoneID = "hosted-zone-id"
	// OptAddressMap translates cloud addresses into the addresses hamaster
	// dials ("cloudCIDR=netCIDR,..."; see addrmap.go). Tests only.
	OptAddressMap = "address-map"
	// OptPollInterval is the shortest delay between polls of the SDK
	// waiters and of the LB's status (default 2s).
	OptPollInterval = "aws-poll-interval"
	// OptMaxAttempts bounds the SDK retryer's attempts per call (default 8).
	OptMaxAttempts = "aws-max-attempts"
	// OptMaxBackoff bounds the retryer's backoff between attempts
	// (default 20s).
	OptMaxBackoff = "aws-max-backoff"
	// OptDeregistrationDelay is the target group's connection draining
	// time (default 120s, AWS's recommended minimum for long-lived
	// connections such as watches; AWS's own default is 300s). At its end
	// ELBv2 closes what is still open (connection termination is on), and
	// DrainTarget returns; the workflows' --drain-grace comes after it.
	OptDeregistrationDelay = "aws-deregistration-delay"
	// OptEndpointMode is how clients reach the apiservers once there is
	// more than one master: "dns" (the default with --hosted-zone-id: the
	// Route53 name of --dns route53 becomes an alias to the NLB once it
	// serves, master 0 keeps the Elastic IP: no outage) or "eip-handover"
	// (the default without a hosted zone: the Elastic IP moves from master
	// 0 to the NLB, an outage of minutes, see PromotionNote).
	OptEndpointMode = "aws-endpoint-mode"
	// OptClientCIDRs are the addresses clients reach the NLB from
	// ("cidr,cidr"; default 0.0.0.0/0): the masters' security groups must
	// let them in, since an NLB keeps the client's address.
	OptClientCIDRs = "aws-client-cidrs"
	// OptReleaseURL is where kube-up masters' new release tarballs come
	// from (default https://dl.k8s.io/release, as kube-up's upgrade; an
	// operator's mirror; providers.ReleaseSource): the flavor writes them.
	OptReleaseURL = "aws-release-url"
)

// Tags.
const (
	TagCluster = "hamaster.io/cluster"
	TagName    = "Name"
	// TagReplica names the replica a data volume belongs to.
	TagReplica = "hamaster.io/replica"
	// TagRole is "data" on a replica's data volume.
	TagRole = "hamaster.io/role"
	// tagDrainedPrefix + replica name marks a drained target on the target
	// group (ELBv2 keeps no per-target metadata; a deregistered target
	// leaves DescribeTargetHealth once its connections are drained).
	tagDrainedPrefix = "hamaster.io/drained/"
)

// Provider is the AWS provider bound to one cluster.
type Provider struct {
	cluster  string
	stateDir string
	opts     map[string]string
	log      *slog.Logger
	// releaseURL is OptReleaseURL (providers.ReleaseSource); recognize
	// tells a master's format (providers.Settings.Recognize); FormatSlot
	// holds the format that writes and reads the masters' user data (the
	// flavor's).
	releaseURL string
	recognize  func(docs map[string]string) string
	providers.FormatSlot
	// unadopted is kube-up's master 0 (its instance ID) when New found it
	// not adopted yet (detectKubeUp), for the errors of read-only
	// commands; Adopt clears it.
	unadopted string

	ec2 *ec2.Client
	elb *elb.Client
	r53 *route53.Client

	amap         addrMap
	poll         time.Duration
	maxWait      time.Duration
	deregDelay   int
	apiPort      int // the masters' apiserver port: the flavor's
	dnsEndpoint  bool
	clientCIDRs  []netip.Prefix
	subnetByZone map[string]string

	sshMu sync.Mutex
	ssh   map[string]*remote.Client // SSH connections by address (ssh.go)
	// sshRetired: connections taken out of ssh after a failed dial,
	// closed by Close.
	sshRetired []*remote.Client

	mu    sync.Mutex // address reservations file
	inst  *instances
	sip   *staticIP
	lbal  *loadBalancer
	names sync.Map // instance ID → Name tag (immutable)
	addrs sync.Map // instance ID → address (hamaster view)
	// privIPs: Name tag → private IP of the last live instance seen with
	// it (a kube-up member is named by its host's address).
	privIPs sync.Map
	eipIP   atomic.Value // the Elastic IP's public address (string)
}

// New is the providers.Factory of the AWS provider.
func New(ctx context.Context, s providers.Settings) (providers.Provider, error) {
	if s.Cluster == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--cluster: required")
	}
	if s.StateDir == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--state-dir: required")
	}
	opts := s.Options
	if opts == nil {
		opts = map[string]string{}
	}
	p := &Provider{cluster: s.Cluster, stateDir: s.StateDir, opts: opts, log: s.Log(), poll: 2 * time.Second, maxWait: 15 * time.Minute, deregDelay: defaultDeregDelay, apiPort: providers.APIServerPort}
	p.ssh = map[string]*remote.Client{}
	if opts[OptSSHBastion] != "" && opts[remote.OptUser] == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s needs --%s (and --%s or an agent)", OptSSHBastion, remote.OptUser, remote.OptKey)
	}
	var err error
	if p.amap, err = parseAddrMap(opts[OptAddressMap]); err != nil {
		return nil, err
	}
	if v := opts[OptPollInterval]; v != "" {
		if p.poll, err = time.ParseDuration(v); err != nil || p.poll <= 0 {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q is not a positive duration", OptPollInterval, v)
		}
	}
	if v := opts[OptDeregistrationDelay]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Hour || d%time.Second != 0 {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q is not a whole number of seconds 0s-3600s (ELBv2's range; 120s or more keeps watches alive)", OptDeregistrationDelay, v)
		}
		p.deregDelay = int(d.Seconds())
	}
	mode := opts[OptEndpointMode]
	if mode == "" && opts[OptHostedZoneID] != "" {
		mode = "dns" // managed DNS is AWS's way: a name, not an address, moves
	}
	switch mode {
	case "", "eip-handover":
	case "dns":
		if opts[OptHostedZoneID] == "" {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s dns needs --%s (the Route53 name lives there)", OptEndpointMode, OptHostedZoneID)
		}
		p.dnsEndpoint = true
	default:
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q (valid: eip-handover, dns)", OptEndpointMode, mode)
	}
	if p.clientCIDRs, err = parseCIDRs(opts[OptClientCIDRs]); err != nil {
		return nil, err
	}
	if p.subnetByZone, err = parseSubnets(opts[OptSubnets]); err != nil {
		return nil, err
	}
	maxAttempts := 8
	if v := opts[OptMaxAttempts]; v != "" {
		if maxAttempts, err = strconv.Atoi(v); err != nil || maxAttempts < 1 {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q is not a positive number", OptMaxAttempts, v)
		}
	}
	maxBackoff := 20 * time.Second
	if v := opts[OptMaxBackoff]; v != "" {
		if maxBackoff, err = time.ParseDuration(v); err != nil || maxBackoff <= 0 {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q is not a positive duration", OptMaxBackoff, v)
		}
	}
	lo := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			// The standard retryer retries throttling codes
			// (RequestLimitExceeded, Throttling, ...), 5xx and transient
			// connection errors, with exponential jittered backoff, a retry
			// quota, and at most maxAttempts attempts.
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = maxAttempts
				o.MaxBackoff = maxBackoff
				o.Backoff = retry.NewExponentialJitterBackoff(maxBackoff)
			})
		}),
	}
	lo = append(lo, config.WithAPIOptions(requestLogging(p.log)))
	if v := opts[OptRegion]; v != "" {
		lo = append(lo, config.WithRegion(v))
	}
	if v := opts[OptEndpoint]; v != "" {
		lo = append(lo, config.WithBaseEndpoint(v))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "aws config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: no region (set it, or AWS_REGION, or a profile's region)", OptRegion)
	}
	p.ec2 = ec2.NewFromConfig(cfg)
	p.elb = elb.NewFromConfig(cfg)
	p.r53 = route53.NewFromConfig(cfg)
	if p.releaseURL = opts[OptReleaseURL]; p.releaseURL != "" {
		if err := providers.CheckHTTPURL(OptReleaseURL, p.releaseURL); err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "%w", err)
		}
	}
	p.recognize = s.Recognize
	p.inst = &instances{p: p}
	p.sip = &staticIP{p: p}
	p.lbal = &loadBalancer{p: p}
	// The masters' format: the flavor named or recorded (kube-up's,
	// KubeUpProvider, or hamaster's own), else read from a running
	// master's user data (detectKubeUp).
	// A cluster kube-up made and hamaster never touched has only
	// kube-up's tags: it is adopted by the mutating workflows' adopt step
	// (KubeUpProvider.Adopt), never here.
	kubeUp := s.Flavor == flavorKubeUp
	if s.Flavor != flavorKubeUp && s.Flavor != flavorHamaster {
		if kubeUp, err = p.detectKubeUp(ctx); err != nil {
			return nil, fmt.Errorf("read the cluster's masters to tell their format (or set --flavor %s or %s): %w", flavorKubeUp, flavorHamaster, err)
		}
	}
	if kubeUp {
		return &KubeUpProvider{Provider: p}, nil
	}
	return p, nil
}

func parseSubnets(v string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		z, s, ok := strings.Cut(kv, "=")
		if !ok || z == "" || !strings.HasPrefix(s, "subnet-") {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q: want zone=subnet-id", OptSubnets, kv)
		}
		m[z] = s
	}
	return m, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return Name }

// Instances implements providers.Provider.
func (p *Provider) Instances() providers.Instances { return p.inst }

// StaticIP implements providers.Provider: the cluster's Elastic IP.
func (p *Provider) StaticIP() lb.StaticIP { return p.sip }

// LoadBalancer implements providers.Provider: a Network Load Balancer.
func (p *Provider) LoadBalancer() lb.LoadBalancer { return p.lbal }

// DNS implements providers.Provider: "static" and "route53".
func (p *Provider) DNS(kind string) (dns.Records, error) {
	switch kind {
	case "", "static":
		return dns.NewStatic(os.Stdout), nil
	case "route53":
		zone := p.opts[OptHostedZoneID]
		if zone == "" {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--dns route53 needs --%s", OptHostedZoneID)
		}
		return &route53Records{p: p, zone: zone}, nil
	}
	return nil, errkind.Errorf(errkind.InvalidArgument, "--dns: %q is not available with the aws provider (valid: static, route53)", kind)
}

// APIServerPort implements providers.APIServerPorter: the port the
// masters' apiservers, the NLB's listener and its health checks use.
func (p *Provider) APIServerPort() int { return p.apiPort }

// SetAPIServerPort implements providers.APIServerPorter: the flavor's
// port (kube-up's masters serve 443).
func (p *Provider) SetAPIServerPort(port int) { p.apiPort = port }

// APIServerURL implements providers.Provider.
func (p *Provider) APIServerURL(r providers.Replica) string {
	return "https://" + net.JoinHostPort(r.Address, strconv.Itoa(p.apiPort))
}

// Close implements providers.Provider: closes the SSH connections.
func (p *Provider) Close() error { return p.closeSSH() }

// Etcd implements providers.Provider: mTLS to every running replica not
// excluded, with the operator client certificate kept in the state dir's
// pki (issued from the cluster CA on first use). With --ssh-user, through
// an SSH tunnel to a master (its public address, or its private one
// through --aws-ssh-bastion): nothing is dialed at a private address from
// the operator's machine (ssh.go).
func (p *Provider) Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error) {
	is, err := p.inst.describe(ctx, "") // no user data needed: cheaper than List
	if err != nil {
		return nil, err
	}
	if p.sshEnabled() {
		skip := map[string]bool{}
		for _, e := range exclude {
			skip[e] = true
		}
		var cands []instance
		for _, i := range is {
			if i.state == providers.StateRunning && !skip[i.name] && i.name != "" {
				cands = append(cands, i)
			}
		}
		if len(cands) == 0 {
			return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no running master to reach etcd through (excluding %v)", p.cluster, exclude)
		}
		return p.etcdOverSSH(ctx, cands)
	}
	rs := make([]providers.Replica, 0, len(is))
	for _, i := range is {
		rs = append(rs, providers.Replica{Name: i.name, Address: i.address, State: i.state})
	}
	return providers.OperatorEtcd(ctx, p.stateDir, p.cluster, rs, exclude, p.log)
}

// waitCtx bounds a waiter by ctx's deadline (the SDK waiters want an
// explicit maximum duration).
func (p *Provider) waitMax(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Millisecond
	}
	return p.maxWait
}

// maxDelay is the waiters' longest delay between polls.
func (p *Provider) maxDelay() time.Duration { return max(p.poll, min(30*time.Second, 8*p.poll)) }

// poll calls check every p.poll until it returns true or an error, or ctx
// ends; what names the wait in the error.
func (p *Provider) pollUntil(ctx context.Context, what string, check func() (bool, error)) error {
	err := wait.Until(ctx, p.poll, what, check)
	if err != nil && ctx.Err() != nil {
		return errkind.Mark(errkind.Unavailable, err) // ran out of time: try later
	}
	return err
}

var (
	_ providers.Formatted     = (*Provider)(nil)
	_ providers.ReleaseSource = (*Provider)(nil)
)

// Carrier implements providers.Formatted: one document, the user data.
func (*Provider) Carrier() string { return providers.CarrierUserData }

// ReleaseURL implements providers.ReleaseSource (OptReleaseURL).
func (p *Provider) ReleaseURL() (string, string) { return p.releaseURL, OptReleaseURL }
